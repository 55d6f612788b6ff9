"""DeepFM, DCN-V2 and MMoE on elastune's click-log data: elastune workloads from outside elastune."""

from ctr_models.dcn_v2 import DCNv2, DCNv2Options, DCNv2Workload
from ctr_models.deepfm import DeepFM, DeepFMOptions, DeepFMWorkload
from ctr_models.mmoe import MMoE, MMoEOptions, MMoEWorkload

__all__ = [
    "DCNv2",
    "DCNv2Options",
    "DCNv2Workload",
    "DeepFM",
    "DeepFMOptions",
    "DeepFMWorkload",
    "MMoE",
    "MMoEOptions",
    "MMoEWorkload",
]
