"""dels_hub: lossless speculative decoding with DFlash block drafters fused with DeLS local heads."""

from transformers import AutoConfig, AutoModel

from . import errors
from .checks import check_compatibility
from .copy_expert import CopyChain, CopySettings
from .dflash import DFlashConfig, DFlashDraftModel, build_target_layer_ids
from .families import FAMILIES, TokenizerFamily, family_of, get_family
from .fingerprint import tokenizer_fingerprint
from .fusion import fuse_logits, fusion_weights
from .generation import CostAware, CostModel, DeLSGenerateOutput, DeLSGenerator, FixedBlocks
from .heads import DeLSLocalHead, DeLSLocalHeadConfig, NGramHeadConfig, NGramLocalHead
from .sampling import Warping, sample, warp_probs
from .verify import verify_greedy, verify_match, verify_rejection

AutoConfig.register(DeLSLocalHeadConfig.model_type, DeLSLocalHeadConfig, exist_ok=True)
AutoModel.register(DeLSLocalHeadConfig, DeLSLocalHead, exist_ok=True)
AutoConfig.register(NGramHeadConfig.model_type, NGramHeadConfig, exist_ok=True)
AutoModel.register(NGramHeadConfig, NGramLocalHead, exist_ok=True)

__version__ = "0.1.0"

__all__ = [
    "CopyChain",
    "CopySettings",
    "CostAware",
    "CostModel",
    "DFlashConfig",
    "DFlashDraftModel",
    "DeLSGenerateOutput",
    "DeLSGenerator",
    "DeLSLocalHead",
    "DeLSLocalHeadConfig",
    "FAMILIES",
    "FixedBlocks",
    "NGramHeadConfig",
    "NGramLocalHead",
    "TokenizerFamily",
    "Warping",
    "build_target_layer_ids",
    "check_compatibility",
    "errors",
    "family_of",
    "fuse_logits",
    "fusion_weights",
    "get_family",
    "sample",
    "tokenizer_fingerprint",
    "verify_greedy",
    "verify_match",
    "verify_rejection",
    "warp_probs",
]
