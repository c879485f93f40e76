"""dsec's errors, one class per exit status of dsec-run (dsec-run(1),
EXIT STATUS).  Every error keeps the record it came from in `.record`
(for an error answer of serve: {"type": "error", "error": ..., "exit_code":
...}) and the exit status in `.exit_code`.

An exec whose command exits non-zero is not an error: its status is in the
result (Result.exit_code).
"""

__all__ = [
    "Error", "Failure", "UsageError", "BadInput", "Unsupported",
    "SequenceConflict", "DsecFailure", "ServeClosed", "error_from",
]


class Error(Exception):
    """Any error dsec reported (or the SDK found in what dsec answered)."""

    #: the exit status dsec-run exits with for this kind of error
    exit_code = 1

    def __init__(self, message, record=None):
        super().__init__(message)
        #: the error record as dsec wrote it (a dict; may be synthesised
        #: by the SDK, then it has the same fields)
        self.record = record if record is not None else {
            "type": "error", "error": message, "exit_code": self.exit_code}
        code = self.record.get("exit_code")
        if isinstance(code, int) and not isinstance(code, bool):
            self.exit_code = code


class Failure(Error):
    """The operation failed (exit status 1, and any status without a class
    of its own)."""


class UsageError(Error):
    """A usage error (exit status 2): e.g. an unknown signal for kill."""

    exit_code = 2


class BadInput(Error):
    """Bad input (exit status 3): an invalid spec or request, an image or
    sandbox that does not exist, a name that is taken..."""

    exit_code = 3


class Unsupported(BadInput):
    """The dsec-run behind this Serve does not know the operation (it
    answered "unknown op", or answered an exec with a session or a stream
    as a plain exec): an older dsec-run."""


class SequenceConflict(Error):
    """A request's seq conflicts with the trajectory (exit status 4): it
    differs from the recorded request of that seq, is past the next one, or
    is running."""

    exit_code = 4


class DsecFailure(Error):
    """dsec itself failed (exit status 125): the sandbox is not running,
    ended during the exec or could not be reached, or the result could not
    be recorded."""

    exit_code = 125


class ServeClosed(Error):
    """The `dsec-run serve` process is gone (closed, exited or killed):
    requests in flight and new ones cannot be answered."""

    exit_code = None

    def __init__(self, message, returncode=None):
        super().__init__(message, {"type": "error", "error": message,
                                   "exit_code": None})
        #: serve's exit status (negative: killed by that signal), or None
        self.returncode = returncode


_BY_CODE = {2: UsageError, 3: BadInput, 4: SequenceConflict, 125: DsecFailure}


def error_from(record):
    """The Error for an error record of dsec (a new exception, not raised)."""
    message = record.get("error")
    if not isinstance(message, str) or not message:
        message = "dsec failed"
    if message.startswith("unknown op"):
        return Unsupported(message, record)
    code = record.get("exit_code")
    if not isinstance(code, int) or isinstance(code, bool):
        return Failure(message, record)
    return _BY_CODE.get(code, Failure)(message, record)
