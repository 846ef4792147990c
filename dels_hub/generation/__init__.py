from .generator import DeLSGenerator
from .loop import DecodeResult, Verifiers, speculative_decode
from .output import DeLSGenerateOutput

__all__ = ["DeLSGenerateOutput", "DeLSGenerator", "DecodeResult", "Verifiers", "speculative_decode"]
