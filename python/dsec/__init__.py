"""dsec: Python client of dsec's sandboxes, over `dsec-run serve`.

    import dsec
    with dsec.Serve() as s:
        sb = s.create(image="busybox:1", memory_mb=256)
        r = sb.exec(["echo", "hi"], seq=1, timeout=10)
        print(r.exit_code, r.stdout)
        sb.remove()

dsec.Serve is for threads (any number of them on one Serve); dsec.aio.Serve
is the same API for asyncio.  Errors are dsec.Error subclasses named after
dsec-run's exit statuses.  See python/README.
"""

from .client import Pending, Sandbox, Serve, Session
from .errors import (BadInput, DsecFailure, Error, Failure, SequenceConflict,
                     ServeClosed, Unsupported, UsageError)
from .protocol import Output, Result
from . import aio

__version__ = "0.1.0"

__all__ = [
    "Serve", "Sandbox", "Session", "Pending", "Result", "Output", "aio",
    "Error", "Failure", "UsageError", "BadInput", "Unsupported",
    "SequenceConflict", "DsecFailure", "ServeClosed",
]
