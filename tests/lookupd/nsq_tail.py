"""A stand-in for nsq's `nsq_tail` (apps/nsq_tail) for the cluster recordings' `exec` step, where the Go tool
is not installed: it finds the topic's nsqds through nsqlookupd's `/lookup`, as go-nsq's
ConnectToNSQLookupd does, subscribes an ephemeral channel on each, prints every message body on a line of
its own, FINs it, and exits 0 after `-n` messages. Only the flags the recordings use."""
from __future__ import annotations

import argparse
import json
import random
import socket
import struct
import sys
import urllib.request

FRAME_RESPONSE, FRAME_ERROR, FRAME_MESSAGE = 0, 1, 2


def _producers(lookupd_http: str, topic: str) -> list[tuple[str, int]]:
    with urllib.request.urlopen(f"http://{lookupd_http}/lookup?topic={topic}", timeout=5) as reply:
        document = json.load(reply)
    return [(p["broadcast_address"], p["tcp_port"]) for p in document["producers"]]


def _read_frame(reader) -> tuple[int, bytes]:
    size, frame_type = struct.unpack(">ii", reader.read(8))
    return frame_type, reader.read(size - 4)


def main() -> int:
    parser = argparse.ArgumentParser(prog="nsq_tail")
    parser.add_argument("--lookupd-http-address", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("-n", type=int, default=0)
    args = parser.parse_args()
    channel = f"tail{random.randrange(1_000_000)}#ephemeral"
    host, port = _producers(args.lookupd_http_address, args.topic)[0]
    sock = socket.create_connection((host, port), timeout=10)
    reader = sock.makefile("rb")
    sock.sendall(b"  V2" + f"SUB {args.topic} {channel}\nRDY 1\n".encode())
    printed = 0
    while not args.n or printed < args.n:
        frame_type, data = _read_frame(reader)
        if frame_type == FRAME_ERROR:
            print(data.decode(), file=sys.stderr)
            return 1
        if frame_type == FRAME_RESPONSE:
            if data == b"_heartbeat_":
                sock.sendall(b"NOP\n")
            continue
        message_id, body = data[10:26], data[26:]
        sys.stdout.write(body.decode() + "\n")
        sock.sendall(b"FIN " + message_id + b"\nRDY 1\n")
        printed += 1
    sys.stdout.flush()
    sock.sendall(b"CLS\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
