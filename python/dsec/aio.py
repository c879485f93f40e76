"""The asyncio client: dsec.Serve's API as coroutines, over asyncio
subprocess pipes, for any number of tasks on one Serve.

    async with dsec.aio.Serve() as s:
        sb = await s.create(image="busybox:1")
        r = await sb.exec(["echo", "hi"], seq=1)
        async for rec in sb.stream(["make", "test"]):
            ...
        await sb.remove()

One reader task hands each answer to the request of its rid; requests are
written whole under a lock.  A Serve belongs to the event loop that
started it.
"""

import asyncio
import itertools
import json
import os

from . import protocol as P
from .client import _environ
from .errors import Error, ServeClosed

__all__ = ["Serve", "Sandbox", "Session", "Pending"]

_CLOSED = object()

# serve's answer lines can be as long as what an exec keeps of its output
_LINE_LIMIT = 1 << 32


class Pending:
    """A request sent and not necessarily answered yet (see Serve.submit)."""

    __slots__ = ("_call", "_q", "_serve", "records", "_done", "_error")

    def __init__(self, serve, call):
        self._serve = serve
        self._call = call
        self._q = asyncio.Queue()
        #: the answer records received so far
        self.records = []
        self._done = False
        self._error = None

    @property
    def rid(self):
        return self._call.rid

    async def _next(self):
        rec, final = await self._q.get()
        if rec is _CLOSED:
            self._done = True
            self._error = self._serve._closed_error()
            raise self._error
        self.records.append(rec)
        if final:
            self._done = True
        return rec, final

    def done(self):
        """Whether every answer has been received."""
        return self._done

    async def result(self, timeout=None):
        """Waits for the last answer and returns it; raises the Error of an
        error record, ServeClosed when serve ended first, and
        asyncio.TimeoutError after timeout seconds (the request stays in
        flight)."""
        while not self._done:
            if timeout is None:
                await self._next()
            else:
                await asyncio.wait_for(self._next(), timeout)
        if self._error is not None:
            raise self._error
        return P.check(self.records[-1])


class Serve:
    """One `dsec-run serve` process, for asyncio: the arguments are
    dsec.Serve's.  `async with Serve(...) as s` starts it and, at the end,
    closes its standard input and waits for it (or: await s.start(), await
    s.close())."""

    def __init__(self, program="dsec-run", env=None, cwd=None, stderr=None,
                 args=()):
        self.program = program
        self._env = _environ(env)
        self._cwd = cwd
        self._stderr = stderr
        self._args = list(args)
        self._proc = None
        self._rids = itertools.count(1)
        self._calls = {}
        self._lines = {}
        self._lineno = 0
        self._closed = False
        self._returncode = None
        self._reader = None
        self._wlock = None

    async def start(self):
        """Starts serve; returns self."""
        if self._proc is not None:
            return self
        self._wlock = asyncio.Lock()
        self._proc = await asyncio.create_subprocess_exec(
            self.program, "serve", *self._args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr, env=self._env, cwd=self._cwd,
            limit=_LINE_LIMIT)
        self._reader = asyncio.ensure_future(self._read())
        return self

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()

    @property
    def pid(self):
        """serve's process id."""
        return self._proc.pid

    @property
    def returncode(self):
        """serve's exit status once it has ended, else None."""
        return self._returncode

    def _closed_error(self):
        rc = self._returncode
        how = ("killed by signal %d" % -rc if rc is not None and rc < 0
               else "exit status %s" % rc if rc is not None else "closed")
        return ServeClosed("dsec-run serve ended (%s)" % how, rc)

    async def _gone(self):
        """The ServeClosed of a serve that cannot be written to: gone or
        going, so its exit status is waited for (a while)."""
        try:
            await asyncio.wait_for(asyncio.shield(self._reader), 10)
        except asyncio.TimeoutError:
            pass
        return self._closed_error()

    async def _read(self):
        stdout = self._proc.stdout
        try:
            while True:
                line = await stdout.readline()
                if not line:
                    break
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(rec, dict):
                    continue
                rid = rec.get("rid")
                if rid is None:
                    rid = self._lines.get(P.answered_line(rec))
                try:
                    pending = self._calls.get(rid)
                except TypeError:  # a rid that is not ours
                    pending = None
                if pending is None:
                    continue
                final = pending._call.final(rec)
                if final:
                    del self._calls[rid]
                    self._lines.pop(pending._call.line, None)
                pending._q.put_nowait((rec, final))
        finally:
            self._returncode = await self._proc.wait()
            self._closed = True
            left = list(self._calls.values())
            self._calls.clear()
            self._lines.clear()
            for pending in left:
                pending._q.put_nowait((_CLOSED, True))

    async def _send(self, requests):
        if self._proc is None:
            raise ServeClosed("dsec-run serve is not started (await "
                              "start(), or async with)")
        pendings, data = [], []
        for fields, kind, count in requests:
            call = P.Call(next(self._rids), kind, count)
            data.append(P.encode(dict(fields, rid=call.rid)))
            pendings.append(Pending(self, call))
        async with self._wlock:
            stdin = self._proc.stdin
            if self._closed or stdin.is_closing():
                raise await self._gone()
            for p in pendings:
                self._lineno += 1
                p._call.line = self._lineno
                self._calls[p._call.rid] = p
                self._lines[self._lineno] = p._call.rid
            try:
                stdin.write(b"".join(data))
                await stdin.drain()
            except (BrokenPipeError, ConnectionResetError, OSError):
                for p in pendings:
                    self._calls.pop(p._call.rid, None)
                    self._lines.pop(p._call.line, None)
                raise await self._gone() from None
        return pendings

    def _forget(self, pending):
        """Stops waiting for the answers of pending."""
        if self._calls.get(pending._call.rid) is pending:
            del self._calls[pending._call.rid]
            self._lines.pop(pending._call.line, None)

    async def submit(self, op, **fields):
        """Sends one request {"op": op, **fields}; returns its Pending once
        written."""
        return (await self._send([(dict(fields, op=op), P.ONE, 1)]))[0]

    async def submit_many(self, requests):
        """Sends several requests (dicts with "op") in one write; returns
        their Pendings, in order."""
        return await self._send([(dict(r), P.ONE, 1) for r in requests])

    async def call(self, op, **fields):
        """Sends one request and returns its answer (a dict); raises the
        Error of an error answer."""
        return await (await self.submit(op, **fields)).result()

    async def close(self):
        """Closes serve's standard input and waits for it to answer what
        is in flight and exit; returns its exit status."""
        if self._proc is None:
            return None
        async with self._wlock:
            if not self._proc.stdin.is_closing():
                self._proc.stdin.close()
        try:
            await self._proc.stdin.wait_closed()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass
        await self._reader
        return self._returncode

    # ---- sandboxes

    async def create(self, spec=None, **kw):
        """Creates a sandbox (keywords as dsec.Serve.create); returns its
        Sandbox."""
        rec = await self.call("create", spec=P.spec_of(spec, **kw))
        return Sandbox(self, rec["id"], rec)

    def sandbox(self, id_or_name):
        """The Sandbox of an existing sandbox, without asking serve."""
        return Sandbox(self, id_or_name)

    async def sandboxes(self, all=False, labels=None):
        """As dsec.Serve.sandboxes."""
        rec = await self.call("ps", all=bool(all))
        out = []
        for r in rec.get("sandboxes", []):
            have = r.get("labels") or {}
            if labels and any(have.get(k) != v for k, v in labels.items()):
                continue
            out.append(Sandbox(self, r["id"], r))
        return out

    async def _events(self, sandbox_id):
        env = dict(self._env if self._env is not None else os.environ)
        env["DSEC_LOG_FORMAT"] = "json"
        proc = await asyncio.create_subprocess_exec(
            self.program, "events", sandbox_id,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            env=env)
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise P.events_error(proc.returncode, err)
        return P.events_of(out)


class Sandbox:
    """A sandbox, through its asyncio Serve: dsec.Sandbox's methods as
    coroutines, and stream() as an async iterator."""

    def __init__(self, serve, sandbox_id, record=None):
        self.serve = serve
        self.id = sandbox_id
        self.record = record if record is not None else {"id": sandbox_id}

    def __repr__(self):
        return "aio.Sandbox(%r)" % self.id

    async def __aenter__(self):
        return self

    async def __aexit__(self, etype, value, tb):
        try:
            await self.remove(force=True)
        except Error:
            if etype is None:
                raise

    async def exec(self, cmd, seq=None, timeout=None, stdin=None, env=None,
                   workdir=None, max_output=None, exclusive=None,
                   service=None, **extra):
        """As dsec.Sandbox.exec."""
        rec = await self.serve.call("exec", **P.exec_fields(
            self.id, P.command(cmd), seq, timeout, stdin, env, workdir,
            max_output, exclusive, service, extra))
        return P.result(rec)

    async def stream(self, cmd, seq=None, timeout=None, stdin=None,
                     env=None, workdir=None, max_output=None, exclusive=None,
                     service=None, **extra):
        """As dsec.Sandbox.stream, an async iterator: `async for rec in
        sb.stream(cmd)` (the request is sent when the iteration starts)."""
        fields = P.exec_fields(self.id, P.command(cmd), seq, timeout, stdin,
                               env, workdir, max_output, exclusive, service,
                               extra)
        fields["stream"] = True
        pending = (await self.serve._send([(dict(fields, op="exec"),
                                            P.STREAM, 1)]))[0]
        first = True
        try:
            while True:
                rec, final = await pending._next()
                item = P.stream_record(rec, first)
                first = False
                yield item
                if final:
                    return
        finally:
            self.serve._forget(pending)

    def session(self, name="main"):
        """The persistent shell NAME of this sandbox."""
        return Session(self, name)

    async def sessions(self):
        rec = await self.serve.call("sessions", id=self.id)
        return [Session(self, s["name"], s) for s in rec.get("sessions", [])]

    async def upload(self, src, dst, archive=None, seq=None):
        """As dsec.Sandbox.upload."""
        return await self._copy("upload", P.host_path(src), dst, archive,
                                seq)

    async def download(self, src, dst, archive=None, seq=None):
        """As dsec.Sandbox.download."""
        return await self._copy("download", src, P.host_path(dst), archive,
                                seq)

    async def _copy(self, op, src, dst, archive, seq):
        fields = {"id": self.id, "src": src, "dst": dst}
        if archive is not None:
            fields["archive"] = bool(archive)
        if seq is not None:
            fields["seq"] = seq
        return await self.serve.call(op, **fields)

    async def fork(self, count=1):
        """As dsec.Sandbox.fork."""
        if not isinstance(count, int) or not 1 <= count <= 1024:
            raise ValueError("fork: count must be 1 to 1024")
        pending = (await self.serve._send([({"op": "fork", "id": self.id,
                                             "count": count}, P.FORK,
                                            count)]))[0]
        while not pending.done():
            await pending._next()
        kids, errors = P.forked(pending.records)
        kids = [Sandbox(self.serve, r["id"], r) for r in kids]
        if errors:
            raise P.fork_error(errors, kids)
        return kids

    async def _op(self, op, **fields):
        rec = await self.serve.call(op, id=self.id, **fields)
        if rec.get("type") == "sandbox":
            self.record = rec
        return rec

    async def inspect(self):
        return await self._op("inspect")

    async def checkpoint(self, name=None):
        return await self._op("checkpoint", **({"name": name} if name else {}))

    async def suspend(self, release=False):
        return await self._op("suspend",
                              **({"release": True} if release else {}))

    async def resume(self):
        return await self._op("resume")

    async def kill(self, signal=None):
        return await self._op("kill", **({"signal": str(signal)}
                                         if signal is not None else {}))

    async def remove(self, force=False):
        return await self._op("rm", **({"force": True} if force else {}))

    async def events(self):
        return await self.serve._events(self.id)


class Session:
    """A persistent shell in a sandbox, for asyncio."""

    def __init__(self, sandbox, name, record=None):
        self.sandbox = sandbox
        self.name = name
        self.record = record if record is not None else {"name": name}

    def __repr__(self):
        return "aio.Session(%r, %r)" % (self.sandbox.id, self.name)

    async def run(self, line, seq=None, timeout=None, stdin=None, env=None,
                  workdir=None, max_output=None, **extra):
        """As dsec.Session.run."""
        if not isinstance(line, str):
            raise TypeError("a session runs one command line (a str)")
        rec = await self.sandbox.serve.call(
            "exec", session=self.name, **P.exec_fields(
                self.sandbox.id, [line], seq, timeout, stdin, env, workdir,
                max_output, None, None, extra))
        return P.result(rec, session=self.name)

    async def remove(self):
        return await self.sandbox.serve.call("session_rm",
                                             id=self.sandbox.id,
                                             name=self.name)
