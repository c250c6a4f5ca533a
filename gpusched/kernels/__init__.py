"""Scheduling kernels: numba ``*_nb`` kernels over the snapshot's numpy columns, each with a
pure NumPy ``*_np`` twin that gives identical results (the property tests compare them).

See README.md beside this file for what each kernel computes and the twin rule.
"""

from gpusched.kernels.accumulate_scores import accumulate_scores_nb, accumulate_scores_np
from gpusched.kernels.balanced_allocation import (
    balanced_cpu_mem_nb,
    balanced_cpu_mem_np,
    balanced_score_nb,
    balanced_score_np,
)
from gpusched.kernels.choose_cards import choose_cards_nb, choose_cards_np
from gpusched.kernels.domain_counts import domain_counts_nb, domain_counts_np
from gpusched.kernels.domain_gather import domain_gather_nb, domain_gather_np
from gpusched.kernels.gang_fit import gang_fit_nb, gang_fit_np
from gpusched.kernels.gpu_summary import gpu_summary_nb, gpu_summary_np
from gpusched.kernels.gpu_summary_rows import gpu_summary_rows_nb, gpu_summary_rows_np
from gpusched.kernels.nvlink_score import nvlink_score_nb, nvlink_score_np
from gpusched.kernels.preemption import preemption_victims_nb, preemption_victims_np
from gpusched.kernels.resource_fit import resource_fit_nb, resource_fit_np
from gpusched.kernels.thermal_filter import thermal_filter_nb, thermal_filter_np
from gpusched.kernels.thermal_score import (
    COOL_C,
    RED_LINE_C,
    thermal_score_nb,
    thermal_score_np,
)

__all__ = [
    "COOL_C",
    "RED_LINE_C",
    "accumulate_scores_nb",
    "accumulate_scores_np",
    "balanced_cpu_mem_nb",
    "balanced_cpu_mem_np",
    "balanced_score_nb",
    "balanced_score_np",
    "choose_cards_nb",
    "choose_cards_np",
    "domain_counts_nb",
    "domain_counts_np",
    "domain_gather_nb",
    "domain_gather_np",
    "gang_fit_nb",
    "gang_fit_np",
    "gpu_summary_nb",
    "gpu_summary_np",
    "gpu_summary_rows_nb",
    "gpu_summary_rows_np",
    "nvlink_score_nb",
    "nvlink_score_np",
    "preemption_victims_nb",
    "preemption_victims_np",
    "resource_fit_nb",
    "resource_fit_np",
    "thermal_filter_nb",
    "thermal_filter_np",
    "thermal_score_nb",
    "thermal_score_np",
]
