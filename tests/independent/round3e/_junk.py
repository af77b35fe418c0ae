"""The junk battery lives once, in tests/independent/_junk.py; the outsiders' case files import it
by plain name from their own folder, so this file hands it on."""
import importlib.util as _util
from pathlib import Path as _Path

_spec = _util.spec_from_file_location("_junk_shared", _Path(__file__).resolve().parent.parent / "_junk.py")
_shared = _util.module_from_spec(_spec)
_spec.loader.exec_module(_shared)
globals().update({k: v for k, v in vars(_shared).items() if not k.startswith("__")})
