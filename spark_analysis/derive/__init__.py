"""Deriving: the tables one connection makes alone (``connection_tables``, its deliveries settled by
``settlements``), and those that join connections: message lifecycles (``lifecycle``, latencies in ``quantiles``'
histograms) and the summary's sums (``tallies``)."""
