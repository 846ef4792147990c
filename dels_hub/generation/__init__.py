from .cost_model import CostModel
from .decode import speculative_decode
from .generator import DeLSGenerator
from .output import DecodeResult, DeLSGenerateOutput
from .policy import CostAware, FixedBlocks
from .settings import DecodeSettings

__all__ = ["CostAware", "CostModel", "DeLSGenerateOutput", "DeLSGenerator", "DecodeResult", "DecodeSettings",
           "FixedBlocks", "speculative_decode"]
