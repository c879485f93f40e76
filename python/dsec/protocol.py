"""What the threaded client (dsec.Serve) and the asyncio one
(dsec.aio.Serve) share: building requests, telling when a request is
answered, and reading answers.  No I/O here.

The protocol is dsec-run serve's (dsec-run(1), "serve"): one JSON object
per line each way; every request carries a "rid" that serve copies into
each of its answers, and answers come in the order requests finish.
"""

import base64
import copy
import json
import os

from .errors import BadInput, DsecFailure, Failure, Unsupported, error_from

__all__ = ["Result", "Output"]

# How many answer records a request gets.
ONE = 0      # one record: the answer, or an error record
STREAM = 1   # "output" records, then the result (or an error record)
FORK = 2     # one record per child (with "index"), or one error record


class Call:
    """Bookkeeping of one request in flight (the transports add how an
    answer is delivered)."""

    __slots__ = ("rid", "kind", "left", "line")

    def __init__(self, rid, kind=ONE, count=1):
        self.rid = rid
        self.kind = kind
        self.left = count
        self.line = None  # serve's line number of the request

    def final(self, rec):
        """Whether rec is the last answer to this request."""
        if self.kind == STREAM:
            return rec.get("type") != "output"
        if self.kind == FORK:
            if "index" in rec:
                self.left -= 1
                return self.left <= 0
            # the fork failed as a whole (no sandbox, no checkpoint)
            return rec.get("type") == "error"
        return True


def encode(request):
    """One request as the bytes of its line.  A request that cannot be
    JSON (NaN, a lone surrogate, a value of no JSON type) is refused here,
    since serve could not tell whom to answer."""
    try:
        text = json.dumps(request, ensure_ascii=False, allow_nan=False,
                          separators=(",", ":"))
        return text.encode("utf-8") + b"\n"
    except (TypeError, ValueError) as e:
        raise BadInput("request cannot be sent: %s" % e) from None


# ---- requests

_RESOURCES = ("cpus", "memory_mb", "pids", "disk_mb")


def _mount(m):
    """A mount as the spec wants it, from a dict or "SRC:DST[:ro|rw]"."""
    if not isinstance(m, str):
        return m
    parts = m.split(":")
    ro = False
    if len(parts) >= 3 and parts[-1] in ("ro", "rw"):
        ro = parts.pop() == "ro"
    if len(parts) != 2 or not parts[0] or not parts[1]:
        raise BadInput("mount `%s`: not SRC:DST[:ro|rw]" % m)
    return {"source": os.path.abspath(parts[0]), "target": parts[1], "ro": ro}


def spec_of(spec=None, **kw):
    """A sandbox spec (dsec-run(1), SPEC) from a whole spec and keyword
    arguments: cpus, memory_mb, pids, disk_mb and resource_class go to
    "resources", network="none" is {"mode": "none"}, mounts may be
    "SRC:DST[:ro]" strings, and every other keyword is the spec's field of
    that name (image, backend, layers, env, workdir, user, protect, hide,
    labels, ttl_s, idle_timeout_s, name, audit, services ...).  Keywords
    that are None are left out."""
    out = copy.deepcopy(spec) if spec is not None else {}
    if not isinstance(out, dict):
        raise BadInput("spec must be a dict")
    resources = dict(out.get("resources") or {})
    for key in _RESOURCES:
        value = kw.pop(key, None)
        if value is not None:
            resources[key] = value
    value = kw.pop("resource_class", None)
    if value is not None:
        resources["class"] = value
    if resources:
        out["resources"] = resources
    if isinstance(kw.get("network"), str):
        kw["network"] = {"mode": kw["network"]}
    if kw.get("mounts") is not None:
        kw["mounts"] = [_mount(m) for m in kw["mounts"]]
    for key, value in kw.items():
        if value is not None:
            out[key] = value
    return out


def command(cmd):
    """An argument vector: a list of strings as it is, a string as
    ["sh", "-c", STRING]."""
    if isinstance(cmd, str):
        return ["sh", "-c", cmd]
    return list(cmd)


def exec_fields(sandbox_id, cmd, seq=None, timeout=None, stdin=None,
                env=None, workdir=None, max_output=None, exclusive=None,
                service=None, extra=None):
    """The fields of an exec request (dsec-run(1), EXEC PROTOCOL)."""
    fields = {"id": sandbox_id, "cmd": cmd}
    if isinstance(stdin, (bytes, bytearray, memoryview)):
        try:
            stdin = bytes(stdin).decode("utf-8")
        except UnicodeDecodeError:
            raise BadInput("stdin is not UTF-8") from None
    for key, value in (("seq", seq), ("timeout_s", timeout),
                       ("stdin", stdin), ("env", env), ("workdir", workdir),
                       ("max_output_bytes", max_output),
                       ("exclusive", exclusive), ("service", service)):
        if value is not None:
            fields[key] = value
    if extra:
        fields.update(extra)
    return fields


def host_path(path):
    """A host path as serve must get it: absolute (serve's working
    directory is not the caller's), a trailing "/" kept."""
    path = os.fspath(path)
    if isinstance(path, bytes):
        path = os.fsdecode(path)
    out = os.path.abspath(path)
    if path.endswith("/") and not out.endswith("/"):
        out += "/"
    return out


# ---- answers

def check(rec):
    """rec itself, or the Error of an error record raised."""
    if rec.get("type") == "error":
        raise error_from(rec)
    return rec


class Result:
    """The result of an exec (dsec-run(1), "The result"): the record's
    fields as attributes, the record itself as .raw.  r["field"] and
    r.get("field") read the record too."""

    __slots__ = ("raw",)

    def __init__(self, raw):
        self.raw = raw

    def __getitem__(self, key):
        return self.raw[key]

    def get(self, key, default=None):
        return self.raw.get(key, default)

    def __repr__(self):
        return "Result(exit_code=%r, stdout=%r, stderr=%r%s%s)" % (
            self.exit_code, _short(self.stdout), _short(self.stderr),
            ", replayed=True" if self.replayed else "",
            ", timed_out=True" if self.timed_out else "")

    @property
    def ok(self):
        """exit_code is 0."""
        return self.raw.get("exit_code") == 0

    @property
    def session_lost(self):
        """The session's shell had to be killed (its state is gone)."""
        return bool(self.raw.get("session_lost", False))


def _field(name, default=None):
    return property(lambda self: self.raw.get(name, default),
                    doc="The result's %s." % name)


for _name, _default in (("id", None), ("seq", None), ("exit_code", None),
                        ("signal", None), ("stdout", ""), ("stderr", ""),
                        ("stdout_bytes", 0), ("stderr_bytes", 0),
                        ("truncated", False), ("timed_out", False),
                        ("oom_killed", False), ("duration_ms", None),
                        ("replayed", False), ("session", None),
                        ("error", None)):
    setattr(Result, _name, _field(_name, _default))
del _name, _default


def _short(s):
    return s if len(s) <= 60 else s[:57] + "..."


def result(rec, session=None):
    """The Result of an exec's answer; raises for an error record, for a
    result that says dsec failed (it has "error"), and (Unsupported) for a
    session exec that serve ran as a plain one."""
    check(rec)
    if rec.get("type") != "result":
        raise Failure("exec: unexpected answer of type %r" % rec.get("type"),
                      dict(rec, type="error", exit_code=1))
    if rec.get("error") is not None:
        raise DsecFailure(str(rec["error"]), dict(rec, type="error"))
    if session is not None and "session" not in rec:
        raise Unsupported(
            "exec --session not in this dsec-run yet: it ran the line as a "
            "command", {"type": "error", "exit_code": 3, "result": rec,
                        "error": "exec session not in this dsec-run yet"})
    return Result(rec)


class Output:
    """An "output" record of a streamed exec: .fd (1 or 2), .stream
    ("stdout" or "stderr"), .data (text) and .bytes, and .raw."""

    __slots__ = ("raw", "fd", "stream", "bytes", "data")

    def __init__(self, raw):
        self.raw = raw
        self.stream = raw.get("stream") or (
            "stderr" if raw.get("fd") == 2 else "stdout")
        self.fd = raw.get("fd") or (2 if self.stream == "stderr" else 1)
        b64 = raw.get("data_b64")
        data = raw.get("data")
        if b64 is not None:
            self.bytes = base64.b64decode(b64)
        else:
            self.bytes = (data or "").encode("utf-8")
        self.data = data if data is not None else self.bytes.decode(
            "utf-8", "replace")

    def __repr__(self):
        return "Output(%s, %r)" % (self.stream, _short(self.data))


def stream_record(rec, first):
    """A streamed exec's answer: an Output, or the final Result.  The first
    output record of a dsec-run whose serve does not stream (it has no
    "fd") raises Unsupported: that serve answers only that record."""
    if rec.get("type") == "output":
        if first and "fd" not in rec:
            raise Unsupported(
                "exec --stream not in this dsec-run's serve yet (it answers "
                "the first output record only)",
                {"type": "error", "exit_code": 3, "output": rec,
                 "error": "exec stream not in this dsec-run yet"})
        return Output(rec)
    return result(rec)


def forked(records):
    """(children's records, error records) of a fork's answers; raises
    when the fork failed as a whole."""
    kids, errors = [], []
    for rec in records:
        if rec.get("type") == "error":
            if "index" not in rec:
                raise error_from(rec)
            errors.append(rec)
        else:
            kids.append(rec)
    kids.sort(key=lambda r: r.get("index", 0))
    return kids, errors


def fork_error(errors, kids):
    """The Failure of a fork some children of which failed; .forked gets
    the sandboxes that were created (to use or to remove)."""
    e = error_from(errors[0])
    e.args = ("%d of %d forks failed: %s" % (
        len(errors), len(errors) + len(kids), e.args[0]),)
    e.errors = errors
    e.forked = kids
    return e


def events_error(returncode, stderr):
    """The Error of a failed `dsec-run events` (its JSON log record)."""
    message = "dsec-run events exited with status %d" % returncode
    for line in reversed(stderr.decode("utf-8", "replace").splitlines()):
        try:
            rec = json.loads(line)
        except ValueError:
            if line.strip():
                message = line.strip()
                break
            continue
        if isinstance(rec, dict) and rec.get("msg"):
            message = rec["msg"]
            break
    return error_from({"type": "error", "error": message,
                       "exit_code": returncode})


def events_of(stdout):
    """The event records of `dsec-run events` output."""
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def answered_line(rec):
    """For an answer without "rid": serve's line number it is about (an
    error record for a line that is not a request), else None."""
    line = rec.get("line")
    if rec.get("type") == "error" and isinstance(line, int):
        return line
    return None
