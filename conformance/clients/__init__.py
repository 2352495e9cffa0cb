"""Client conformance: the toolkit plays nsqd and judges an NSQ client library through a small driver program.

See README.md here for the driver contract, the cases (NSQC-<SEC>-NNN) and the libraries as measured."""
