"""Ports checked before the plans load: a port in use is one error naming it (uvicorn
logs the bind failure and exits 1 from inside its server, after the plans loaded)."""

import errno
import socket

from aotplan.core.errors import AotplanError


def check_free(host, ports):
    if len(set(ports)) < len(ports):
        raise AotplanError(f"--http-port and --grpc-port are both {ports[0]}: give them different ports")
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise AotplanError(f"--host {host}: {e.strerror}") from None
    family, _, _, _, address = infos[0]
    for port in ports:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((address[0], port) + tuple(address[2:]))
            except OSError as e:
                why = "in use" if e.errno == errno.EADDRINUSE else e.strerror
                raise AotplanError(f"port {port} on {host}: {why}") from None
