"""The database's codes in a vector database (Milvus): the collection written by `shdh index
--engine milvus`, searched by `shdh serve --engine milvus` with the offline ranking's order, and
items added and removed while it serves.

Why Milvus and not more of our own index: past one machine (hundreds of millions of codes, a
collection that grows every day) the store must shard, replicate, persist and take writes while
it serves, which Milvus does, on Kubernetes by its operator. It ranks binary vectors by Hamming
distance only; the codes are stored with each segment's bits repeated by its integer level
weight (shdh.ranking.repeated_bits), which makes that distance Eq. 4's, and the service closes
the ties at the k-th place by database row (shdh.ranking.tie_closure). The same client code
talks to a Milvus Lite file, a standalone server and a cluster (pymilvus's MilvusClient).

May import: core, ranking, runtime.
"""
