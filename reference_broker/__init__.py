"""A minimal, readable nsqd: the TCP protocol V2 and the HTTP API of nsqd v1.3.0, on blocking sockets."""
