"""`kubectl preemption list|stop|resume`: kueuectl's verbs, flags and columns, over the live
cluster (listing.py builds the tables, control.py the stop and resume patches, cluster.py reads
and writes)."""
