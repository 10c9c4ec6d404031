#!/usr/bin/env python3
"""A paio stage in standard-library Python, written from docs/protocol.md.

Registers with paiod, acknowledges rule batches (recording the DRL rates it
is given), and answers `collect` with the statistics of one channel, "read",
as if it had read 1 MiB per collection. Prints one JSON line per event so a
test can follow it.

    python3 docs/examples/python_stage.py SOCKET [--seconds N] [--label job=I1]
"""
import argparse, json, os, socket, struct, sys, time

def send(sock, msg):
    payload = json.dumps(msg).encode()
    sock.sendall(struct.pack(">I", len(payload)) + payload)

def recv_exact(sock, n):
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise EOFError("paiod closed the connection")
        buf += chunk
    return buf

def recv(sock):
    (n,) = struct.unpack(">I", recv_exact(sock, 4))
    if n > 1 << 20:
        raise ValueError(f"frame of {n} bytes is above the 1 MiB limit")
    return json.loads(recv_exact(sock, n))

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("socket")
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--label", action="append", default=[])
    args = ap.parse_args()
    labels = dict(l.split("=", 1) for l in args.label)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(args.socket)
    noop = {"name": "default", "kind": "noop", "config": {"kind": "noop"}}
    info = {"name": "python-stage", "pid": os.getpid(), "host": socket.gethostname(),
            "labels": labels, "classifiers": ["request_type"],
            "channels": [{"name": "read", "objects": [noop], "object_rules": [],
                          "default_object": "default"}],
            "channel_rules": [[{"request_type": "read"}, "read"]], "default_channel": None}
    send(sock, {"type": "hello", "version": 1, "ppid": os.getppid(),
                "user": str(os.getuid()), "info": info})
    welcome = recv(sock)
    if welcome.get("type") != "welcome":
        sys.exit(f"registration refused: {welcome}")
    print(json.dumps({"event": "registered", "stage_id": welcome["stage_id"]}), flush=True)
    ops = nbytes = 0
    sock.settimeout(0.2)
    deadline = time.monotonic() + args.seconds
    while time.monotonic() < deadline:
        try:
            msg = recv(sock)
        except socket.timeout:
            continue
        if msg["type"] == "rules":
            for rule in msg["rules"]:
                if rule["rule"] == "configure":
                    print(json.dumps({"event": "rate", "object": rule["object"],
                                      "rate": rule["config"].get("rate")}), flush=True)
            send(sock, {"type": "ack", "id": msg["id"]})
        elif msg["type"] == "collect":
            ops, nbytes = ops + 16, nbytes + (1 << 20)
            send(sock, {"type": "stats", "id": msg["id"], "stats": {
                "stage": "python-stage", "collected_at_ns": time.monotonic_ns(),
                "channels": [{"name": "read", "ops": ops, "bytes": nbytes, "objects": [
                    {"name": "default", "kind": "noop", "ops": ops, "bytes": nbytes}]}]}})
        elif msg["type"] == "error":
            print(json.dumps({"event": "error", "message": msg["message"]}), flush=True)
        elif msg["type"] == "goodbye":
            break
    send(sock, {"type": "goodbye", "reason": "done"})
    print(json.dumps({"event": "done", "collects": ops // 16}), flush=True)

if __name__ == "__main__":
    main()
