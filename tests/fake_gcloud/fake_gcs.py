#!/usr/bin/env python3
"""A fake Google Cloud Storage endpoint for podq's tests, serving a directory read-only.

    fake_gcs.py ROOT

ROOT/<bucket>/<object name> is an object. It answers what object_store's GCS client asks
for: the XML API's bucket listing (`GET /<bucket>?list-type=2&prefix=..&delimiter=/`) and
object reads (`HEAD`/`GET /<bucket>/<percent-encoded name>`). It listens on 127.0.0.1 on a
free port, prints `listening on http://127.0.0.1:<port>` once ready, and logs one line per
request to ROOT/requests.log.
"""

import datetime
import email.utils
import os
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.sax.saxutils import escape

ROOT = sys.argv[1]
LOG_LOCK = threading.Lock()


def objects(bucket):
    base = os.path.join(ROOT, bucket)
    for dirpath, _, files in os.walk(base):
        for name in files:
            path = os.path.join(dirpath, name)
            yield os.path.relpath(path, base).replace(os.sep, "/"), path


def meta(path):
    st = os.stat(path)
    return st.st_size, st.st_mtime, '"%x-%x"' % (st.st_ino, int(st.st_mtime * 1e6))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        with LOG_LOCK, open(os.path.join(ROOT, "requests.log"), "a") as f:
            f.write("%s %s\n" % (self.command, self.path))

    def send(self, status, body=b"", headers=()):
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        if not any(k.lower() == "content-length" for k, _ in headers):
            self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def not_found(self):
        self.send(404, b"<Error><Code>NoSuchKey</Code></Error>",
                  [("Content-Type", "application/xml")])

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        parts = url.path.lstrip("/").split("/", 1)
        bucket = urllib.parse.unquote(parts[0])
        if not os.path.isdir(os.path.join(ROOT, bucket)):
            return self.not_found()
        if len(parts) == 1 or parts[1] == "":
            return self.list(bucket, urllib.parse.parse_qs(url.query))
        self.object(bucket, urllib.parse.unquote(parts[1]))

    do_HEAD = do_GET

    def object(self, bucket, name):
        path = os.path.join(ROOT, bucket, name)
        if ".." in name.split("/") or not os.path.isfile(path):
            return self.not_found()
        size, mtime, etag = meta(path)
        body = b"" if self.command == "HEAD" else open(path, "rb").read()
        self.send(200, body, [
            ("Content-Length", str(size)),
            ("Last-Modified", email.utils.formatdate(mtime, usegmt=True)),
            ("ETag", etag),
            ("Content-Type", "application/octet-stream"),
        ])

    def list(self, bucket, query):
        prefix = query.get("prefix", [""])[0]
        delimiter = query.get("delimiter", [None])[0]
        contents, prefixes = [], set()
        for key, path in sorted(objects(bucket)):
            if not key.startswith(prefix):
                continue
            rest = key[len(prefix):]
            if delimiter and delimiter in rest:
                prefixes.add(prefix + rest.split(delimiter, 1)[0] + delimiter)
            else:
                contents.append((key, path))
        out = ['<?xml version="1.0" encoding="UTF-8"?>',
               '<ListBucketResult xmlns="http://doc.s3.amazonaws.com/2006-03-01">',
               "<Name>%s</Name><Prefix>%s</Prefix><IsTruncated>false</IsTruncated>"
               % (escape(bucket), escape(prefix))]
        for key, path in contents:
            size, mtime, etag = meta(path)
            iso = datetime.datetime.fromtimestamp(mtime, datetime.timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%S.000Z")
            out.append("<Contents><Key>%s</Key><Size>%d</Size><LastModified>%s</LastModified>"
                       "<ETag>%s</ETag></Contents>" % (escape(key), size, iso, escape(etag)))
        for p in sorted(prefixes):
            out.append("<CommonPrefixes><Prefix>%s</Prefix></CommonPrefixes>" % escape(p))
        out.append("</ListBucketResult>")
        self.send(200, "".join(out).encode(), [("Content-Type", "application/xml")])


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print("listening on http://127.0.0.1:%d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
