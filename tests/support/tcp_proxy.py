"""A TCP relay on loopback that a test can cut and restore, to make a server unreachable for a
client while it keeps running for everyone else (an API server the operator cannot reach).

:class:`TcpProxy` listens on a port of its own and relays every connection to ``target``
byte for byte (TLS passes through untouched: the client still checks the server's certificate,
whose names are the host's, not the port's). :meth:`TcpProxy.cut` closes the listening socket
and every relayed connection, so that the client's connections are reset and new ones are
refused, as when the server is down; :meth:`TcpProxy.restore` listens again on the same port.
"""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    """Relays ``127.0.0.1:port`` to ``target`` (host, port) until :meth:`close`.

    Attributes:
      port: the port it listens on (the same after every :meth:`restore`).
      connections: how many connections it has accepted so far.
    """

    def __init__(self, target: tuple[str, int]):
        self.target = target
        self.connections = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._listener: socket.socket | None = None
        self.port = 0
        self._listen()

    @property
    def cut_off(self) -> bool:
        """Whether it refuses connections now."""
        return self._listener is None

    def _listen(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.port = listener.getsockname()[1]
        self._listener = listener
        threading.Thread(
            target=self._accept, args=(listener,), daemon=True, name=f"proxy-{self.port}"
        ).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by cut() or close()
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
                upstream.settimeout(None)
            except OSError:
                client.close()  # the server itself is down: so is the relay
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    client.close()
                    upstream.close()
                    return
                self.connections += 1
                self._open.update((client, upstream))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(source, sink), daemon=True, name="proxy-pump"
                ).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            # One side closed: close both, as the far end would see it.
            for sock in (source, sink):
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)
                sock.close()
            with self._lock:
                self._open.difference_update((source, sink))

    def cut(self) -> None:
        """Refuses new connections and resets the open ones: the server is unreachable."""
        with self._lock:
            listener, self._listener = self._listener, None
            open_now, self._open = self._open, set()
        if listener is not None:
            # shutdown() wakes the thread blocked in accept() (close() alone does not, on Linux).
            with contextlib.suppress(OSError):
                listener.shutdown(socket.SHUT_RDWR)
            listener.close()
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def restore(self) -> None:
        """Listens again on the same port after :meth:`cut`."""
        if self._listener is None:
            self._listen()

    def close(self) -> None:
        """Stops relaying for good."""
        self.cut()
