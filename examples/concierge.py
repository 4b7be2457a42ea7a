"""The hotel Concierge of the seed pages, as a terminal chat.

The turn engine has not landed yet, so this example only imports falai and
says so.
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # run from a checkout too

import falai  # noqa: E402

print("falai", falai.__version__, "- the turn engine is not implemented yet; this demo will talk once it is.")
