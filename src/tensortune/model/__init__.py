"""Cost models: learn from measurements which configurations are fast.

`XGBRankModel` (gradient boosted trees with a pairwise ranking objective, AutoTVM's
model), `BootstrapEnsemble` (several of them, for uncertainty), `FeatureExtractor`
(numeric features of configurations and workloads), and `pretrain_from_db`.
"""

from .base import CostModel, RandomModel, relevance
from .ensemble import BootstrapEnsemble
from .features import FeatureExtractor
from .metrics import kendall_tau, top_k_error
from .xgb_rank import XGBParams, XGBRankModel

__all__ = ["BootstrapEnsemble", "CostModel", "FeatureExtractor", "RandomModel", "XGBParams",
           "XGBRankModel", "kendall_tau", "relevance", "top_k_error"]
