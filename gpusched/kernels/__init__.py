"""Scheduling kernels: numba ``*_nb`` kernels over the snapshot's numpy columns, each with a
pure NumPy ``*_np`` twin that gives identical results (the property tests compare them).

See README.md beside this file for what each kernel computes and the twin rule.
"""

from gpusched.kernels.allocated import allocated_score_nb, allocated_score_np
from gpusched.kernels.balanced_allocation import (
    balanced_cpu_mem_nb,
    balanced_cpu_mem_np,
    balanced_score_nb,
    balanced_score_np,
)
from gpusched.kernels.best_fit_score import best_fit_score_nb, best_fit_score_np
from gpusched.kernels.choose_cards import choose_cards_nb, choose_cards_np
from gpusched.kernels.domain_counts import domain_counts_nb, domain_counts_np
from gpusched.kernels.domain_gather import domain_gather_nb, domain_gather_np
from gpusched.kernels.fit_resources import (
    REASON_CPU,
    REASON_MEMORY,
    REASON_NOT_EVALUATED,
    REASON_OK,
    REASON_PODS,
    fit_resources_nb,
    fit_resources_np,
)
from gpusched.kernels.frag_score import frag_score_nb, frag_score_np
from gpusched.kernels.gang_fit import gang_fit_nb, gang_fit_np
from gpusched.kernels.gpu_summary import gpu_summary_nb, gpu_summary_np
from gpusched.kernels.nvlink_score import nvlink_score_nb, nvlink_score_np
from gpusched.kernels.packing_score import packing_score_nb, packing_score_np
from gpusched.kernels.preemption import preemption_victims_nb, preemption_victims_np
from gpusched.kernels.thermal_filter import thermal_filter_nb, thermal_filter_np
from gpusched.kernels.thermal_score import (
    COOL_C,
    RED_LINE_C,
    thermal_score_nb,
    thermal_score_np,
)

__all__ = [
    "COOL_C",
    "REASON_CPU",
    "REASON_MEMORY",
    "REASON_NOT_EVALUATED",
    "REASON_OK",
    "REASON_PODS",
    "RED_LINE_C",
    "allocated_score_nb",
    "allocated_score_np",
    "balanced_cpu_mem_nb",
    "balanced_cpu_mem_np",
    "balanced_score_nb",
    "balanced_score_np",
    "best_fit_score_nb",
    "best_fit_score_np",
    "choose_cards_nb",
    "choose_cards_np",
    "domain_counts_nb",
    "domain_counts_np",
    "domain_gather_nb",
    "domain_gather_np",
    "fit_resources_nb",
    "fit_resources_np",
    "frag_score_nb",
    "frag_score_np",
    "gang_fit_nb",
    "gang_fit_np",
    "gpu_summary_nb",
    "gpu_summary_np",
    "nvlink_score_nb",
    "nvlink_score_np",
    "packing_score_nb",
    "packing_score_np",
    "preemption_victims_nb",
    "preemption_victims_np",
    "thermal_filter_nb",
    "thermal_filter_np",
    "thermal_score_nb",
    "thermal_score_np",
]
