"""A minimal nsqlookupd (nsq's `nsqlookupd/`): the registry nsqd registers its topics and channels with over the
TCP protocol "  V1", and that consumers and nsqadmin ask over HTTP. `python -m reference_broker.nsqlookupd`."""
