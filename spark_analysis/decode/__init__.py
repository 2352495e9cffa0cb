"""Decoding: a reassembled connection into event rows (``events``' schema, ``kinds``' labels) through
``nsq_protocol``: nsqd's V2 (``v2``, whose ``ConnectionDecoder`` drives a connection) and nsqlookupd's V1 (``v1``),
IDENTIFY's bodies as typed structs (``identify``)."""
