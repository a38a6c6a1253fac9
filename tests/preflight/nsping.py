"""An ICMP echo over a raw socket (root), printing the summary line `hccn_tool -i N -ping -g address A` prints:
the stand-in hccn_tool of the network-namespace test runs it inside the chip's namespace (no ping binary needed).

    python nsping.py ADDRESS [COUNT]
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import time


def checksum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    total = (total >> 16) + (total & 0xFFFF)
    total += total >> 16
    return ~total & 0xFFFF


def ping(address: str, count: int = 3, wait: float = 0.5) -> int:
    ident = os.getpid() & 0xFFFF
    received = 0
    with socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP) as s:
        for seq in range(count):
            header = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
            payload = b"preflight"
            packet = struct.pack("!BBHHH", 8, 0, checksum(header + payload), ident, seq) + payload
            try:
                s.sendto(packet, (address, 0))
            except OSError:
                continue
            deadline = time.monotonic() + wait
            while (left := deadline - time.monotonic()) > 0:
                s.settimeout(left)
                try:
                    data, _ = s.recvfrom(2048)
                except OSError:  # socket.timeout is an OSError
                    break
                ihl = (data[0] & 0x0F) * 4
                kind, _, _, rid, rseq = struct.unpack("!BBHHH", data[ihl:ihl + 8])
                if kind == 0 and rid == ident and rseq == seq:
                    received += 1
                    print(f"recv seq={seq},time={(wait - left) * 1000:.6f}ms")
                    break
    loss = 100.0 * (count - received) / count
    print(f"{count} packets transmitted, {received} received, {loss:.2f}% packet loss")
    return 0 if received else 1


if __name__ == "__main__":
    print(f"device 0 PING {sys.argv[1]}")
    sys.exit(ping(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 3))
