"""python-api.md, Modules: `import falai` pulls in no third-party module."""
import subprocess
import sys

import falai

THIRD_PARTY = ("requests", "jsonschema", "urllib3", "charset_normalizer", "idna", "certifi")


def test_import_falai_imports_no_third_party_module():
    # Compare with the modules the interpreter itself loaded (a site .pth may preload some).
    code = ("import sys; before = set(sys.modules); import falai; "
            f"print(','.join(m for m in {THIRD_PARTY!r} if m in sys.modules and m not in before))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=falai.__file__.rsplit("/", 1)[0])
    assert out.stdout.strip() == ""


def test_import_falai_loads_only_the_standard_library():
    code = ("import sys; before = set(sys.modules); import falai; "
            "new = {m.split('.')[0] for m in set(sys.modules) - before}; "
            "print(','.join(sorted(m for m in new if m not in sys.stdlib_module_names and m != 'falai')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=falai.__file__.rsplit("/", 1)[0])
    assert out.stdout.strip() == ""


def test_every_public_name_exists():
    for name in falai.__all__:
        assert hasattr(falai, name), name


def test_import_is_fast_enough_to_have_no_import_time_work():
    code = "import time; t = time.perf_counter(); import falai; print(time.perf_counter() - t)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=falai.__file__.rsplit("/", 1)[0])
    assert float(out.stdout) < 1.0
