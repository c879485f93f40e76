"""The asyncio client: dsec.Serve's API as coroutines, over asyncio
subprocess pipes, for any number of tasks on one Serve.

    async with dsec.aio.Serve() as s:
        sb = await s.create(image="busybox:1")
        r = await sb.exec(["echo", "hi"], seq=1)
        async for rec in sb.stream(["make", "test"]):
            ...
        await sb.remove()

Answers are handed to the request of their rid as they are read (in the
pipe's protocol callback); each request is written whole.  A Serve belongs
to the event loop that started it.
"""

import asyncio
import collections
import itertools
import json
import os

from . import protocol as P
from .client import _environ
from .errors import Error, ServeClosed

__all__ = ["Serve", "Sandbox", "Session", "Pending"]

_CLOSED = object()


class Pending:
    """A request sent and not necessarily answered yet (see Serve.submit)."""

    __slots__ = ("_call", "_items", "_waiter", "_serve", "records", "_done",
                 "_error")

    def __init__(self, serve, call):
        self._serve = serve
        self._call = call
        self._items = collections.deque()
        self._waiter = None
        #: the answer records received so far
        self.records = []
        self._done = False
        self._error = None

    @property
    def rid(self):
        return self._call.rid

    def _push(self, item):
        self._items.append(item)
        w = self._waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def _next(self):
        while not self._items:
            self._waiter = self._serve._loop.create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None
        rec, final = self._items.popleft()
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


class _Protocol(asyncio.SubprocessProtocol):
    """serve's pipes: answers are split into lines and handed to their
    requests as they are read (no reader task in between), and writes wait
    while the pipe is full."""

    def __init__(self, serve):
        self.serve = serve
        self.parts = []  # the pieces of a line not yet ended
        self.paused = False
        self.drainers = []

    def pipe_data_received(self, fd, data):
        if fd != 1:
            return
        start = 0
        while True:
            nl = data.find(b"\n", start)
            if nl < 0:
                break
            if self.parts:
                self.parts.append(data[start:nl])
                line = b"".join(self.parts)
                self.parts = []
            else:
                line = data[start:nl]
            self.serve._dispatch(line)
            start = nl + 1
        if start < len(data):
            self.parts.append(data[start:])

    def pause_writing(self):
        self.paused = True

    def resume_writing(self):
        self.paused = False
        self._wake()

    def _wake(self):
        for f in self.drainers:
            if not f.done():
                f.set_result(None)
        self.drainers = []

    async def drain(self):
        while self.paused and not self.serve._closed:
            f = self.serve._loop.create_future()
            self.drainers.append(f)
            await f

    def connection_lost(self, exc):
        # serve has exited and every pipe of it is closed
        self.paused = False
        self._wake()
        self.serve._ended()


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
        self._loop = None
        self._transport = None
        self._proto = None
        self._stdin = None
        self._end = None
        self._rids = itertools.count(1)
        self._calls = {}
        self._lines = {}
        self._lineno = 0
        self._closed = False
        self._returncode = None

    async def start(self):
        """Starts serve; returns self."""
        if self._transport is not None:
            return self
        self._loop = asyncio.get_running_loop()
        self._end = self._loop.create_future()
        self._transport, self._proto = await self._loop.subprocess_exec(
            lambda: _Protocol(self), self.program, "serve", *self._args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr, env=self._env, cwd=self._cwd)
        self._stdin = self._transport.get_pipe_transport(0)
        return self

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()

    @property
    def pid(self):
        """serve's process id."""
        return self._transport.get_pid()

    @property
    def returncode(self):
        """serve's exit status once it has ended, else None."""
        return self._returncode

    def _closed_error(self):
        rc = self._returncode
        how = ("killed by signal %d" % -rc if rc is not None and rc < 0
               else "exit status %s" % rc if rc is not None else "closed")
        return ServeClosed("dsec-run serve ended (%s)" % how, rc)

    def _dispatch(self, line):
        """One answer line: to the request of its rid (or of its line)."""
        try:
            rec = json.loads(line)
        except ValueError:
            return
        if not isinstance(rec, dict):
            return
        rid = rec.get("rid")
        if rid is None:
            rid = self._lines.get(P.answered_line(rec))
        try:
            pending = self._calls.get(rid)
        except TypeError:  # a rid that is not ours
            return
        if pending is None:
            # answers to a request nobody waits for any more
            return
        final = pending._call.final(rec)
        if final:
            del self._calls[rid]
            self._lines.pop(pending._call.line, None)
        pending._push((rec, final))

    def _ended(self):
        self._returncode = self._transport.get_returncode()
        self._closed = True
        left = list(self._calls.values())
        self._calls.clear()
        self._lines.clear()
        for pending in left:
            pending._push((_CLOSED, True))
        if not self._end.done():
            self._end.set_result(self._returncode)

    async def _gone(self):
        """The ServeClosed of a serve that cannot be written to: gone or
        going, so its exit status is waited for (a while)."""
        try:
            await asyncio.wait_for(asyncio.shield(self._end), 10)
        except asyncio.TimeoutError:
            pass
        return self._closed_error()

    async def _send(self, requests):
        if self._transport is None:
            raise ServeClosed("dsec-run serve is not started (await "
                              "start(), or async with)")
        pendings, data = [], []
        for fields, kind, count in requests:
            call = P.Call(next(self._rids), kind, count)
            data.append(P.encode(dict(fields, rid=call.rid)))
            pendings.append(Pending(self, call))
        if self._closed or self._stdin.is_closing():
            raise await self._gone()
        # a write is whole and in order (the transport buffers it): no
        # lock; only a full pipe makes us wait
        for p in pendings:
            self._lineno += 1
            p._call.line = self._lineno
            self._calls[p._call.rid] = p
            self._lines[self._lineno] = p._call.rid
        self._stdin.write(b"".join(data))
        if self._proto.paused:
            await self._proto.drain()
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
        if self._transport is None:
            return None
        if not self._stdin.is_closing():
            self._stdin.close()
        await asyncio.shield(self._end)
        self._transport.close()
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
