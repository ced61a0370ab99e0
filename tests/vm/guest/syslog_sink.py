"""Writes what programs send to syslog (a datagram socket at SOCKET) to FILE, one message per line.

The guest runs no syslog daemon; this keeps iscsid's log for the results (tests/vm/guest/main.sh, step attach-iser).
Usage: syslog_sink.py SOCKET FILE
"""
import os
import socket
import sys


def main() -> None:
    path, out = sys.argv[1], sys.argv[2]
    if os.path.exists(path):
        os.unlink(path)
    sink = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sink.bind(path)
    with open(out, "ab", buffering=0) as log:
        while True:
            log.write(sink.recv(65536).rstrip(b"\0\n") + b"\n")


if __name__ == "__main__":
    main()
