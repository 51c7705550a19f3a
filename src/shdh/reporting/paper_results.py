"""The numbers published in the SHDH paper (Wang et al. 2017, Tables 1 and 2), as data.

They sit beside our own results in docs/results.md so a reader can see at a glance where a run
stands against the paper. They are the paper's CIFAR-100 and IAPRTC-12 figures: a run on
another dataset (Fashion-MNIST-H, the offline default) is not comparable number for number, only
in the ordering of the methods. NDCG here is the paper's variant, which normalises by the ideal
order of the retrieved list (our `ndcg_list`). None marks a cell the paper left blank (KMH at 48
bits, which 4-bit subspaces do allow; the paper does not say why, and we run it).
"""

from __future__ import annotations

# method -> metric -> (value at each of `bits`)
Table = dict[str, dict[str, tuple[float | None, ...]]]

CIFAR100_BITS = (32, 48, 64)
CIFAR100: Table = {  # paper Table 1, @100
    "kmh": {"acg": (0.2023, None, 0.2261), "dcg": (6.0749, None, 6.7295),
            "ndcg": (0.4169, None, 0.4189)},
    "itq": {"acg": (0.2091, 0.2312, 0.2427), "dcg": (6.1814, 6.7583, 7.0593),
            "ndcg": (0.4197, 0.4243, 0.4272)},
    "cosdish+h": {"acg": (0.1345, 0.1860, 0.2008), "dcg": (4.2678, 5.5619, 5.9169),
                  "ndcg": (0.4072, 0.4417, 0.4523)},
    "ksh+h": {"acg": (0.1611, 0.1576, 0.1718), "dcg": (4.9904, 4.9282, 5.3378),
              "ndcg": (0.3940, 0.3897, 0.3924)},
    "dpsh": {"acg": (0.4643, 0.4973, 0.5140), "dcg": (11.5129, 12.2878, 12.7072),
             "ndcg": (0.5650, 0.5693, 0.5751)},
    "cosdish": {"acg": (0.1366, 0.1428, 0.1501), "dcg": (4.5079, 4.6957, 4.8601),
                "ndcg": (0.4063, 0.4156, 0.4127)},
    "lfh": {"acg": (0.1152, 0.1291, 0.1271), "dcg": (3.7847, 4.3299, 4.3239),
            "ndcg": (0.3924, 0.4008, 0.4011)},
    "ksh": {"acg": (0.1291, 0.1393, 0.1509), "dcg": (3.3520, 4.3009, 4.8293),
            "ndcg": (0.3711, 0.3766, 0.3763)},
    "shdh": {"acg": (0.5225, 0.5724, 0.6084), "dcg": (12.7460, 13.9575, 14.7861),
             "ndcg": (0.6141, 0.6281, 0.6406)},
}  # fmt: skip

IAPRTC12_BITS = (48, 64, 128)
IAPRTC12: Table = {  # paper Table 2, @100
    "kmh": {"acg": (None, 3.7716, 3.7446), "dcg": (None, 87.5121, 87.0493),
            "ndcg": (None, 0.6427, 0.6373)},
    "itq": {"acg": (3.8351, 3.8502, 3.8609), "dcg": (88.5562, 88.9057, 89.2016),
            "ndcg": (0.6626, 0.6633, 0.6652)},
    "cosdish+h": {"acg": (3.8249, 3.7245, 3.8448), "dcg": (88.3121, 86.3037, 88.5056),
                  "ndcg": (0.6957, 0.6885, 0.6970)},
    "ksh+h": {"acg": (3.7304, 3.7535, 3.7779), "dcg": (86.5606, 87.0894, 87.5743),
              "ndcg": (0.6459, 0.6494, 0.6518)},
    "dpsh": {"acg": (4.0085, 4.0227, 4.0980), "dcg": (91.4972, 92.0570, 93.4613),
             "ndcg": (0.6618, 0.6607, 0.6630)},
    "cosdish": {"acg": (3.6856, 3.6781, 3.7018), "dcg": (85.2368, 85.1622, 85.7606),
                "ndcg": (0.6412, 0.6443, 0.6408)},
    "lfh": {"acg": (3.7076, 3.6851, 3.6988), "dcg": (85.7599, 85.2662, 85.6601),
            "ndcg": (0.6390, 0.6365, 0.6400)},
    "ksh": {"acg": (3.8357, 3.8317, 3.7909), "dcg": (88.5041, 88.5589, 87.8282),
            "ndcg": (0.6507, 0.6482, 0.6408)},
    "shdh": {"acg": (4.4870, 4.5284, 4.5869), "dcg": (100.6373, 101.4812, 102.6919),
             "ndcg": (0.7372, 0.7440, 0.7489)},
}  # fmt: skip

TABLES = {"cifar100": (CIFAR100_BITS, CIFAR100), "iaprtc12": (IAPRTC12_BITS, IAPRTC12)}
