"""Reading: capture files and tables wherever they are (``storage``), pcap and pcapng records as segments
(``pcapfile``, ``datasource``), a TCP connection's two streams from its segments (``reassembly``), and the tables
read back (``parquet_source``)."""
