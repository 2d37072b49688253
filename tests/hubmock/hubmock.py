#!/usr/bin/env python3
"""hubmock.py - a small Hugging Face Hub look-alike for the atlas-fetch tests.

Serves model repositories from local directories on 127.0.0.1 (a random
free port, printed as the first line on stdout), with the parts of the Hub
API that atlas-fetch uses:

  GET /api/models/ORG/NAME/revision/REV[?blobs=true]  commit sha + siblings
  GET /ORG/NAME/resolve/REV/PATH   small files directly (ETag = git blob
                                   sha1); LFS files (*.safetensors, *.bin,
                                   *.pth) redirect with 302 to a second
                                   "CDN" server on another port
  GET /cdn/SHA256                  LFS content, honouring Range (206)

Usage:
  hubmock.py --repo ORG/NAME@REV=DIR [--repo ...] [--gated ORG/NAME]
             [--token TOKEN] [--log FILE]

Faults, chosen by environment variables (each counts per process):
  HUBMOCK_FAIL500=N       the first N file requests answer 500
  HUBMOCK_API500=N        the first N API requests answer 500
  HUBMOCK_429=N           the first N file requests answer 429, Retry-After: 1
  HUBMOCK_DROP=PATH       the first transfer of PATH stops after half the
                          bytes and closes the connection
  HUBMOCK_CORRUPT=PATH    PATH is served with one byte changed (the
                          advertised sha256 stays the true one)
  HUBMOCK_TRICKLE=PATH:BPS  PATH is sent at about BPS bytes per second

The log file gets one line per request: "METHOD PATH range=R auth=A"
(A is "yes" when an Authorization header came), for the tests to check
resumes and that the token never reaches the CDN. Standard library only.
"""
import argparse
import hashlib
import json
import os
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LFS_SUFFIXES = (".safetensors", ".bin", ".pth")
STATE_LOCK = threading.Lock()
STATE = {"file500": int(os.environ.get("HUBMOCK_FAIL500", "0")),
         "api500": int(os.environ.get("HUBMOCK_API500", "0")),
         "r429": int(os.environ.get("HUBMOCK_429", "0")),
         "dropped": False}
DROP = os.environ.get("HUBMOCK_DROP", "")
CORRUPT = os.environ.get("HUBMOCK_CORRUPT", "")
TRICKLE_PATH, _, TRICKLE_BPS = os.environ.get("HUBMOCK_TRICKLE", "").partition(":")


def take(counter):
    """Decrement a fault counter; true while it was positive."""
    with STATE_LOCK:
        if STATE[counter] > 0:
            STATE[counter] -= 1
            return True
        return False


class Repo:
    """One revision of a repository: files, hashes and a commit sha."""

    def __init__(self, rid, rev, root):
        self.rid, self.rev, self.files = rid, rev, {}
        for dirpath, _, names in os.walk(root):
            for n in names:
                full = os.path.join(dirpath, n)
                rel = os.path.relpath(full, root)
                data = open(full, "rb").read()
                lfs = rel.endswith(LFS_SUFFIXES)
                blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
                self.files[rel] = {"data": data, "lfs": lfs, "blob": blob,
                                   "sha256": hashlib.sha256(data).hexdigest()}
        h = hashlib.sha1(("%s@%s" % (rid, rev)).encode())
        for rel in sorted(self.files):
            h.update(rel.encode() + self.files[rel]["blob"].encode())
        self.commit = h.hexdigest()

    def listing(self):
        sib = []
        for rel in sorted(self.files):
            f = self.files[rel]
            s = {"rfilename": rel, "blobId": f["blob"], "size": len(f["data"])}
            if f["lfs"]:
                s["lfs"] = {"sha256": f["sha256"], "size": len(f["data"]),
                            "pointerSize": 134}
            sib.append(s)
        return {"id": self.rid, "modelId": self.rid, "sha": self.commit, "siblings": sib}


class Hub:
    """All repositories, by id then by revision name or commit."""

    def __init__(self, specs, gated, token):
        self.repos, self.gated, self.token = {}, set(gated), token
        for spec in specs:
            left, _, root = spec.partition("=")
            rid, _, rev = left.partition("@")
            r = Repo(rid, rev or "main", root)
            self.repos.setdefault(rid, {})[r.rev] = r
            self.repos[rid][r.commit] = r
        self.blobs = {}
        for revs in self.repos.values():
            for r in revs.values():
                for rel, f in r.files.items():
                    if f["lfs"]:
                        # one object may be stored under several names
                        names, _ = self.blobs.get(f["sha256"], (set(), f))
                        names.add(rel)
                        self.blobs[f["sha256"]] = (names, f)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub = None
    cdn_port = 0
    log_path = None

    def log_message(self, fmt, *args):
        pass

    def note(self):
        if self.log_path:
            with STATE_LOCK, open(self.log_path, "a") as f:
                f.write("%s %s range=%s auth=%s\n" % (
                    self.command, self.path, self.headers.get("Range", "-"),
                    "yes" if self.headers.get("Authorization") else "no"))

    def reply(self, code, body=b"", headers=None, ctype="application/json"):
        if isinstance(body, str):
            body = body.encode()
        self.send_response(code)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def error(self, code, ecode, msg):
        self.reply(code, json.dumps({"error": msg}),
                   {"X-Error-Code": ecode, "X-Error-Message": msg})

    def authorized(self, rid):
        if rid not in self.hub.gated:
            return True
        got = self.headers.get("Authorization", "")
        if not got:
            self.error(401, "GatedRepo", "Access to model %s is restricted." % rid)
            return False
        if got != "Bearer %s" % self.hub.token:
            self.error(403, "GatedRepo", "Access to model %s is restricted." % rid)
            return False
        return True

    def find(self, rid, rev):
        revs = self.hub.repos.get(rid)
        if revs is None:
            self.error(404, "RepoNotFound", "Repository not found")
            return None
        r = revs.get(rev)
        if r is None:
            self.error(404, "RevisionNotFound", "Invalid rev id: %s" % rev)
        return r

    def send_content(self, names, data, headers):
        """Body of a file known under `names`: Range, corruption, dropping
        and trickling."""
        if CORRUPT in names:
            data = data[:len(data) // 2] + bytes([data[len(data) // 2] ^ 0xFF]) + \
                data[len(data) // 2 + 1:]
        start, code = 0, 200
        rng = self.headers.get("Range", "")
        if rng.startswith("bytes=") and rng.endswith("-"):
            start = int(rng[6:-1])
            if start >= len(data):
                self.reply(416, b"", {"Content-Range": "bytes */%d" % len(data)})
                return
            code = 206
            headers["Content-Range"] = "bytes %d-%d/%d" % (start, len(data) - 1, len(data))
        body = data[start:]
        self.send_response(code)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        drop = False
        with STATE_LOCK:
            if DROP in names and not STATE["dropped"]:
                STATE["dropped"] = drop = True
        if drop:
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            self.close_connection = True
            return
        if TRICKLE_PATH in names:
            bps = max(1, int(TRICKLE_BPS or "1000"))
            chunk = max(1, bps // 10)
            for i in range(0, len(body), chunk):
                self.wfile.write(body[i:i + chunk])
                self.wfile.flush()
                time.sleep(0.1)
            return
        self.wfile.write(body)

    def file_faults(self):
        if take("r429"):
            self.reply(429, "slow down", {"Retry-After": "1"}, "text/plain")
            return True
        if take("file500"):
            self.reply(500, "internal error", None, "text/plain")
            return True
        return False

    def do_HEAD(self):
        self.do_GET()

    def do_GET(self):
        self.note()
        url = urllib.parse.urlsplit(self.path)
        parts = [urllib.parse.unquote(p) for p in url.path.split("/")[1:]]
        if parts[:1] == ["cdn"] and len(parts) == 2:
            return self.cdn(parts[1])
        if parts[:2] == ["api", "models"] and len(parts) >= 6 and parts[4] == "revision":
            if take("api500"):
                return self.reply(500, "internal error", None, "text/plain")
            rid = parts[2] + "/" + parts[3]
            if not self.authorized(rid):
                return
            r = self.find(rid, "/".join(parts[5:]))
            if r:
                self.reply(200, json.dumps(r.listing()))
            return
        if len(parts) >= 5 and parts[2] == "resolve":
            rid = parts[0] + "/" + parts[1]
            if not self.authorized(rid):
                return
            r = self.find(rid, parts[3])
            if not r:
                return
            rel = "/".join(parts[4:])
            f = r.files.get(rel)
            if f is None:
                return self.error(404, "EntryNotFound", "%s does not exist" % rel)
            if self.file_faults():
                return
            h = {"X-Repo-Commit": r.commit}
            if f["lfs"]:
                h.update({"X-Linked-Etag": '"%s"' % f["sha256"],
                          "X-Linked-Size": str(len(f["data"])),
                          "Location": "http://127.0.0.1:%d/cdn/%s" % (self.cdn_port,
                                                                      f["sha256"])})
                return self.reply(302, b"", h, "text/plain")
            h["ETag"] = '"%s"' % f["blob"]
            return self.send_content({rel}, f["data"], h)
        self.error(404, "NotFound", "no route")

    def cdn(self, sha):
        if sha not in self.hub.blobs:
            return self.reply(404, "no such object", None, "text/plain")
        if self.file_faults():
            return
        names, f = self.hub.blobs[sha]
        self.send_content(names, f["data"], {"ETag": '"%s"' % sha})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", action="append", default=[])
    ap.add_argument("--gated", action="append", default=[])
    ap.add_argument("--token", default="")
    ap.add_argument("--log")
    a = ap.parse_args()
    Handler.hub = Hub(a.repo, a.gated, a.token)
    Handler.log_path = a.log
    cdn = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    Handler.cdn_port = cdn.server_address[1]
    api = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    for s in (cdn, api):
        s.daemon_threads = True
    threading.Thread(target=cdn.serve_forever, daemon=True).start()
    print(api.server_address[1], flush=True)
    try:
        api.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
