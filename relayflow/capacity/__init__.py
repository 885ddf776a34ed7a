"""relayflow's capacity model: the load a rate of flows puts on each limited cloud resource.

``oplog`` reads the operations a run recorded (``relayflow.gcp.recording``); ``deployment``
holds what the configuration says (indexes, queue shards and rates, Cloud Run sizes), read from
topology.json here and from the Terraform by ``terraform``; ``rules`` are the hotspot rules
(monotonic indexed fields without a shard, document ids in key order), shared by the model and
the hotspot guard test; ``limits`` are the published limits, each with its source; ``model``
computes the load, headroom and ceiling of every resource at a target rate; ``report`` prints
them. ``bench/capacity.py`` runs flows through the local stack and feeds all of it.
"""
