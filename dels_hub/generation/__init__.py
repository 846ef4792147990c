from .decode import speculative_decode
from .generator import DeLSGenerator
from .output import DecodeResult, DeLSGenerateOutput
from .settings import DecodeSettings

__all__ = ["DeLSGenerateOutput", "DeLSGenerator", "DecodeResult", "DecodeSettings", "speculative_decode"]
