"""The tokenizer fingerprint: whether a head fits a target's tokenizer (``checks.check_head``) and which registered
family a tokenizer belongs to (``families.family_of``)."""

import hashlib
import json

SPECIAL_ROLES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def tokenizer_fingerprint(tokenizer) -> dict:
    """``{"vocab_size", "sha256"}`` of a tokenizer: its length and a stable hash of token->id and specials.

    Two tokenizers with the same fingerprint map every string to the same ids, so a head trained with one
    reads and predicts the ids of the other. The hash covers the full token->id map (added tokens included)
    and the special-token roles, serialised as sorted JSON.
    """
    vocab = sorted(tokenizer.get_vocab().items(), key=lambda item: (item[1], item[0]))
    specials = sorted(
        (str(role), str(token)) for role, token in tokenizer.special_tokens_map.items() if role in SPECIAL_ROLES
    )
    payload = json.dumps({"vocab": vocab, "specials": specials}, ensure_ascii=False, separators=(",", ":"))
    return {"vocab_size": len(tokenizer), "sha256": hashlib.sha256(payload.encode("utf-8")).hexdigest()}
