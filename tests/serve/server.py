"""Starts `ascent serve` for the server's test suites and stops it, checking that it stops well. Python's standard
library only.

A test starts the server with --port 0 and reads the port from the line it prints on stderr when ready
("ascent serve: listening on http://HOST:PORT"). With ASCENT_SERVE_URL set, the tests use the server already
running there instead (another OpenAI-compatible server, say) and start and stop nothing; the checks of the start and
the stop are then left out, and the run says so."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ASCENT = os.environ.get("ASCENT_BIN", os.path.join(ROOT, "build", "release", "ascent"))
SHARED = os.environ.get("ASCENT_SHARED", os.path.join(ROOT, "..", "shared"))
MODEL = os.path.join(SHARED, "models", "story-656K")

LISTENING = re.compile(r"ascent serve: listening on (http://[^\s/]+)")
SANITIZER = re.compile(r"ERROR: \w*Sanitizer|: runtime error: |SUMMARY: \w*Sanitizer")


class Server:
    """One server process (or, with ASCENT_SERVE_URL, one that runs elsewhere). url is its base URL, with no
    trailing slash; external is true when this object did not start it."""

    def __init__(self, args, ready_timeout=120):
        self.lines = []
        self.external = bool(os.environ.get("ASCENT_SERVE_URL"))
        if self.external:
            self.url = os.environ["ASCENT_SERVE_URL"].rstrip("/")
            self.proc = None
            print(f"server: using the one at {self.url} (ASCENT_SERVE_URL): its start and stop are not checked")
            return
        cmd = [ASCENT, "serve"] + [str(a) for a in args]
        print("server: " + " ".join(cmd))
        sys.stdout.flush()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        ready = threading.Event()
        found = []

        def read():
            for line in self.proc.stderr:
                self.lines.append(line.rstrip("\n"))
                m = LISTENING.search(line)
                if m and not found:
                    found.append(m.group(1))
                    ready.set()
            ready.set()  # the process closed stderr (it exited) before saying it listens

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        start = time.monotonic()
        ready.wait(ready_timeout)
        if not found:
            exited = self.proc.poll()
            self.proc.kill()
            self.proc.wait()
            why = f"exited with {exited}" if exited is not None else f"was still silent after {ready_timeout} s"
            raise RuntimeError(f"ascent serve {why} before printing 'listening on'; its stderr ends:\n" + self.tail())
        self.url = found[0]
        print(f"server: listening on {self.url} after {time.monotonic() - start:.1f} s")
        sys.stdout.flush()

    def tail(self, n=30):
        return "\n".join("  | " + line for line in self.lines[-n:])

    def alive(self):
        return self.external or self.proc.poll() is None

    def sanitizer_report(self):
        """The first line of a sanitizer's report on the server's stderr, or None."""
        for line in self.lines:
            if SANITIZER.search(line):
                return line.strip()[:200]
        return None

    def stop(self, timeout=60):
        """Sends SIGTERM and waits for the exit. Returns the exit status, None when the server had not exited within
        timeout seconds (it is then killed), or "external" for a server this object did not start."""
        if self.external:
            return "external"
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            code = None
        self.reader.join(10)
        return code


def host_port(url):
    """(host, port) of a base URL such as http://127.0.0.1:8080."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return host, int(port)


def http(url, method, path, body=None, timeout=300):
    """One request on its own connection (Connection: close): (status, body text, a chunked body joined)."""
    host, port = host_port(url)
    data = json.dumps(body).encode() if body is not None else b""
    with socket.create_connection((host, port), timeout=timeout) as s:
        s.sendall(f"{method} {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
        raw = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            raw += chunk
    head, _, payload = raw.partition(b"\r\n\r\n")
    if b"transfer-encoding: chunked" in head.lower():
        out, rest = b"", payload
        while rest:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            out += rest[:n]
            rest = rest[n + 2:]
        payload = out
    return int(head.split()[1]), payload.decode()
