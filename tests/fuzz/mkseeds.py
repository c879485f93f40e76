#!/usr/bin/env python3
"""Writes the hand-made seeds of the proxy's fuzz targets into
tests/fuzz/corpus/proxy-request/ and tests/fuzz/corpus/proxy-hello/:
valid and invalid request heads and ClientHellos, one for each case of
issue #12 (tests/fuzz/README).  The seeds are committed; run this again
after changing it.  Inputs libFuzzer found (sha1 names) and crashes
(crash-*) sit beside them and are left alone."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def write(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


# ---- request heads

def req(line, *headers, body=b""):
    h = line.encode() if isinstance(line, str) else line
    h += b"\r\n"
    for x in headers:
        h += (x.encode() if isinstance(x, str) else x) + b"\r\n"
    return h + b"\r\n" + body


REQUESTS = {
    "get": req("GET http://example.com/a?b=c HTTP/1.1", "Host: example.com",
               "User-Agent: Wget", "Accept: */*", "Connection: close"),
    "get-port": req("GET http://example.com:8080/ HTTP/1.1",
                    "Host: example.com:8080"),
    "get-http10": req("GET http://example.com/ HTTP/1.0", "Host: example.com"),
    "get-query-only": req("HEAD http://example.com?x HTTP/1.1",
                          "Host: example.com"),
    "get-no-path": req("GET http://example.com HTTP/1.1", "Host: example.com"),
    "get-ipv4": req("GET http://127.0.0.1:8000/answer.txt HTTP/1.1",
                    "Host: 127.0.0.1:8000"),
    "get-ipv4-short": req("GET http://127.1:8000/ HTTP/1.1", "Host: 127.1:8000"),
    "get-ipv4-hex": req("GET http://0x7f.1/ HTTP/1.1", "Host: 0x7f.1"),
    "get-ipv4-int": req("GET http://2130706433/ HTTP/1.1", "Host: 2130706433"),
    "get-ipv4-octal": req("GET http://0177.0.0.1/ HTTP/1.1",
                          "Host: 0177.0.0.1"),
    "get-ipv4-bad": req("GET http://1.2.3.4.5/ HTTP/1.1", "Host: 1.2.3.4.5"),
    "get-ipv6": req("GET http://[::1]:8000/ HTTP/1.1", "Host: [::1]:8000"),
    "get-ipv6-mapped": req("GET http://[::ffff:127.0.0.1]/ HTTP/1.1",
                           "Host: [::ffff:127.0.0.1]"),
    "get-ipv6-zone": req("GET http://[fe80::1%25eth0]/ HTTP/1.1",
                         "Host: [fe80::1%25eth0]"),
    "get-trailing-dot": req("GET http://github.com./ HTTP/1.1",
                            "Host: github.com."),
    "get-two-dots": req("GET http://github.com../ HTTP/1.1",
                        "Host: github.com.."),
    "get-upper": req("GET http://GITHUB.COM/ HTTP/1.1", "Host: GitHub.Com"),
    "get-idna": req("GET http://g\u00efthub.com/ HTTP/1.1".encode(),
                    "Host: g\u00efthub.com".encode()),
    "get-punycode": req("GET http://xn--gthub-cta.com/ HTTP/1.1",
                        "Host: xn--gthub-cta.com"),
    "get-empty-label": req("GET http://a..com/ HTTP/1.1", "Host: a..com"),
    "get-long-label": req("GET http://" + "a" * 64 + ".com/ HTTP/1.1",
                          "Host: " + "a" * 64 + ".com"),
    "get-long-name": req("GET http://" + ("b" * 63 + ".") * 4 + "c/ HTTP/1.1",
                         "Host: " + ("b" * 63 + ".") * 4 + "c"),
    "get-underscore": req("GET http://_a.b-c.example/ HTTP/1.1",
                          "Host: _a.b-c.example"),
    "host-mismatch": req("GET http://allowed.example/ HTTP/1.1",
                         "Host: github.com"),
    "host-port-mismatch": req("GET http://allowed.example/ HTTP/1.1",
                              "Host: allowed.example:8080"),
    "host-missing": req("GET http://allowed.example/ HTTP/1.1"),
    "host-twice": req("GET http://allowed.example/ HTTP/1.1",
                      "Host: allowed.example", "Host: github.com"),
    "host-empty": req("GET http://allowed.example/ HTTP/1.1", "Host:"),
    "host-space": req("GET http://allowed.example/ HTTP/1.1",
                      "Host : allowed.example"),
    "host-userinfo": req("GET http://allowed.example/ HTTP/1.1",
                         "Host: x@allowed.example"),
    "userinfo": req("GET http://allowed.example@github.com/ HTTP/1.1",
                    "Host: github.com"),
    "userinfo-backslash": req("GET http://allowed.example\\@github.com/ HTTP/1.1",
                              "Host: github.com"),
    "fragment": req("GET http://example.com/#x HTTP/1.1", "Host: example.com"),
    "https-absolute": req("GET https://example.com/ HTTP/1.1",
                          "Host: example.com"),
    "origin-form": req("GET / HTTP/1.1", "Host: example.com"),
    "asterisk-form": req("OPTIONS * HTTP/1.1", "Host: example.com"),
    "http2": req("GET http://example.com/ HTTP/2.0", "Host: example.com"),
    "http-lower": req("GET http://example.com/ http/1.1", "Host: example.com"),
    "bare-lf": b"GET http://allowed.example/ HTTP/1.1\nHost: github.com\n\n",
    "bare-lf-header": b"GET http://allowed.example/ HTTP/1.1\r\n"
                      b"Host: allowed.example\nHost: github.com\r\n\r\n",
    "bare-cr": b"GET http://allowed.example/ HTTP/1.1\r\nX: a\rHost: b\r\n\r\n",
    "nul": b"GET http://allowed.example/ HTTP/1.1\r\nHost: allowed.exa\0mple"
           b"\r\n\r\n",
    "obs-fold": req("GET http://allowed.example/ HTTP/1.1", "X: a",
                    " Host: github.com", "Host: allowed.example"),
    "pipelined": req("GET http://allowed.example/ HTTP/1.1",
                     "Host: allowed.example",
                     body=req("GET / HTTP/1.1", "Host: github.com")),
    "post": req("POST http://example.com/upload HTTP/1.1", "Host: example.com",
                "Content-Length: 5", body=b"hello"),
    "post-chunked": req("POST http://example.com/ HTTP/1.1",
                        "Host: example.com", "Transfer-Encoding: chunked",
                        body=b"5\r\nhello\r\n0\r\n\r\n"),
    "post-cl-te": req("POST http://example.com/ HTTP/1.1", "Host: example.com",
                      "Content-Length: 5", "Transfer-Encoding: chunked"),
    "post-cl-twice": req("POST http://example.com/ HTTP/1.1",
                         "Host: example.com", "Content-Length: 5",
                         "Content-Length: 6"),
    "post-cl-bad": req("POST http://example.com/ HTTP/1.1",
                       "Host: example.com", "Content-Length: 0x10"),
    "connect": req("CONNECT example.com:443 HTTP/1.1", "Host: example.com:443",
                   "User-Agent: curl"),
    "connect-no-host": req("CONNECT example.com:443 HTTP/1.1"),
    "connect-host-mismatch": req("CONNECT allowed.example:443 HTTP/1.1",
                                 "Host: github.com:443"),
    "connect-host-port": req("CONNECT example.com:443 HTTP/1.1",
                             "Host: example.com:8443"),
    "connect-no-port": req("CONNECT example.com HTTP/1.1"),
    "connect-bad-port": req("CONNECT example.com:99999 HTTP/1.1"),
    "connect-zero-port": req("CONNECT example.com:0 HTTP/1.1"),
    "connect-ipv4": req("CONNECT 127.0.0.1:443 HTTP/1.1"),
    "connect-ipv4-hex": req("CONNECT 0x7f.1:443 HTTP/1.1"),
    "connect-ipv6": req("CONNECT [::1]:443 HTTP/1.1", "Host: [::1]:443"),
    "connect-ipv6-bare": req("CONNECT ::1:443 HTTP/1.1"),
    "connect-trailing-dot": req("CONNECT github.com.:443 HTTP/1.1"),
    "connect-hello": req("CONNECT example.com:443 HTTP/1.1",
                         body=b"\x16\x03\x01\x00\x05\x01\x00\x00\x01\x00"),
    "many-headers": req("GET http://example.com/ HTTP/1.1", "Host: example.com",
                        *["X-%d: %d" % (i, i) for i in range(130)]),
    "method-bad": req("G(T http://example.com/ HTTP/1.1", "Host: example.com"),
    "method-long": req("ABCDEFGHIJKLMNOPQ http://example.com/ HTTP/1.1",
                       "Host: example.com"),
    "two-spaces": req("GET  http://example.com/ HTTP/1.1", "Host: example.com"),
    "empty-line": b"\r\n\r\n",
    "incomplete": b"GET http://example.com/ HTTP/1.1\r\nHost: exa",
    "empty": b"",
    "entry-wildcard": b"*.github.com:443\n",
    "entry-any-port": b":443\n",
    "entry-ipv6": b"[::ffff:100.64.0.1]:80\n",
    "addresses": bytes([100, 64, 0, 1]) + bytes(12),
}


# ---- ClientHellos

def ext(t, data):
    return struct.pack(">HH", t, len(data)) + data


def sni_ext(*names, name_type=0):
    lst = b"".join(struct.pack(">BH", name_type, len(n)) + n for n in names)
    return ext(0, struct.pack(">H", len(lst)) + lst)


def hello_msg(exts, suites=b"\x13\x01\x13\x02\x13\x03", session=b"\x00" * 32,
              no_extensions=False):
    body = b"\x03\x03" + b"\x42" * 32 + bytes([len(session)]) + session
    body += struct.pack(">H", len(suites)) + suites + b"\x01\x00"
    if not no_extensions:
        e = b"".join(exts)
        body += struct.pack(">H", len(e)) + e
    return b"\x01" + struct.pack(">I", len(body))[1:] + body


def records(msg, size=16384, version=b"\x03\x01"):
    out = b""
    for i in range(0, len(msg), size):
        part = msg[i:i + size]
        out += b"\x16" + version + struct.pack(">H", len(part)) + part
    return out


def browser_exts(name, pq=True):
    """Extensions as a current browser sends them: GREASE, SNI, groups,
    a post-quantum key share (which makes the hello span TCP segments)."""
    shares = b""
    if pq:
        shares += struct.pack(">HH", 0x11ec, 1216) + b"\x11" * 1216
    shares += struct.pack(">HH", 0x001d, 32) + b"\x22" * 32
    return [
        ext(0x0a0a, b""),
        sni_ext(name),
        ext(0x0017, b""),
        ext(0xff01, b"\x00"),
        ext(0x000a, b"\x00\x08\x0a\x0a\x11\xec\x00\x1d\x00\x17"),
        ext(0x000b, b"\x01\x00"),
        ext(0x0023, b""),
        ext(0x0010, b"\x00\x0c\x02h2\x08http/1.1"),
        ext(0x0005, b"\x01\x00\x00\x00\x00"),
        ext(0x000d, b"\x00\x08\x04\x03\x08\x04\x04\x01\x05\x03"),
        ext(0x0033, struct.pack(">H", len(shares)) + shares),
        ext(0x002d, b"\x01\x01"),
        ext(0x002b, b"\x06\x1a\x1a\x03\x04\x03\x03"),
        ext(0x1a1a, b"\x00"),
    ]


B = b"example.com"
HELLOS = {
    "sni": records(hello_msg([sni_ext(B)])),
    "sni-upper-dot": records(hello_msg([sni_ext(b"EXAMPLE.com.")])),
    "sni-other": records(hello_msg([sni_ext(b"not-the-host.example")])),
    "browser": records(hello_msg(browser_exts(B))),
    "browser-split-records": records(hello_msg(browser_exts(B)), 512),
    "browser-tiny-records": records(hello_msg(browser_exts(B)), 3),
    "browser-no-pq": records(hello_msg(browser_exts(B, pq=False))),
    "tls10-record": records(hello_msg([sni_ext(B)]), version=b"\x03\x00"),
    "no-sni": records(hello_msg([ext(0x000a, b"\x00\x02\x00\x1d")])),
    "no-extensions": records(hello_msg([], no_extensions=True)),
    "two-names": records(hello_msg([sni_ext(B, b"github.com")])),
    "name-type-1": records(hello_msg([sni_ext(B, name_type=1)])),
    "sni-empty-name": records(hello_msg([sni_ext(b"")])),
    "sni-empty-list": records(hello_msg([ext(0, b"\x00\x00")])),
    "sni-short": records(hello_msg([ext(0, b"\x00")])),
    "sni-idna": records(hello_msg([sni_ext("g\u00efthub.com".encode())])),
    "sni-address": records(hello_msg([sni_ext(b"127.0.0.1")])),
    "sni-long": records(hello_msg([sni_ext(b"a" * 300)])),
    "sni-nul": records(hello_msg([sni_ext(b"example.com\0.evil")])),
    "ech": records(hello_msg([sni_ext(B), ext(0xfe0d, b"\x00" * 40)])),
    "esni": records(hello_msg([sni_ext(B), ext(0xffce, b"\x00" * 40)])),
    "dup-extension": records(hello_msg([sni_ext(B), sni_ext(B)])),
    "padded-9k": records(hello_msg([sni_ext(B), ext(0x0015, bytes(9000))])),
    "padded-17k": records(hello_msg([sni_ext(B), ext(0x0015, bytes(16500))]),
                          4096),
    "ext-overrun": records(hello_msg([sni_ext(B)])[:-2] + b"\xff\xff"),
    "session-33": records(hello_msg([sni_ext(B)], session=bytes(33))),
    "suites-odd": records(hello_msg([sni_ext(B)], suites=b"\x13\x01\x13")),
    "suites-empty": records(hello_msg([sni_ext(B)], suites=b"")),
    "trailing-in-record": records(hello_msg([sni_ext(B)]) + b"\x01"),
    "app-data-inside": (lambda r: r[:5 + 100] + b"\x17" + r[5 + 100 + 1:])(
        records(hello_msg(browser_exts(B)), 100)),
    "followed-by-data": records(hello_msg([sni_ext(B)])) +
                        b"\x17\x03\x03\x00\x05hello",
    "truncated": records(hello_msg([sni_ext(B)]))[:-7],
    "server-hello": b"\x16\x03\x03\x00\x04\x02\x00\x00\x00",
    "empty-record": b"\x16\x03\x01\x00\x00",
    "huge-record": b"\x16\x03\x01\x40\x01",
    "huge-handshake": b"\x16\x03\x01\x00\x04\x01\xff\xff\xff",
    "sslv2": b"\x80\x2e\x01\x00\x02\x00\x15\x00\x00\x00\x10",
    "http": b"GET / HTTP/1.1\r\nHost: example.com\r\n\r\n",
    "ssh": b"SSH-2.0-OpenSSH_9.2\r\n",
    "one-byte": b"\x16",
    "empty": b"",
}


def main():
    for name, data in REQUESTS.items():
        write("proxy-request", name, data)
    for name, data in HELLOS.items():
        write("proxy-hello", name, data)
    print("%d request seeds, %d hello seeds" % (len(REQUESTS), len(HELLOS)),
          file=sys.stderr)


if __name__ == "__main__":
    main()
