"""Correctness measures: answer match and recall, abstention, recited share, wrong facts in
context; checked against hand-labelled responses (tests/fixtures/correctness/)."""

import json
from pathlib import Path

import pytest

from pmi_decode.metrics.correctness import (
    abstains,
    answer_match,
    answer_recall,
    correctness_measures,
    recited_share,
    response_words,
)
from pmi_decode.metrics.fact_support import fact_features, wrong_facts
from pmi_decode.batch.scoring import score_records

FIXTURES = Path(__file__).parent / "fixtures" / "correctness"
LIBRARY = ("The Harlow Street Library is open Monday to Friday from 9 am to 8 pm, and on Saturdays from 10 am to "
           "4 pm. It is closed on Sundays. Members can borrow up to 12 books for 3 weeks. A single ride costs 2 "
           "dollars. The annual pass costs $90 and includes unlimited 45-minute rides.")


def _rows(name):
    return [json.loads(line) for line in (FIXTURES / name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _precision_recall(pairs):
    tp = sum(p and g for p, g in pairs)
    fp = sum(p and not g for p, g in pairs)
    fn = sum(g and not p for p, g in pairs)
    return tp / max(tp + fp, 1), tp / max(tp + fn, 1)


def test_answer_match_and_recall():
    assert answer_match("The Duchy was founded in 911 as a fiefdom.", ["911"]) == 1.0
    assert answer_match("It was founded in 1911.", ["911"]) == 0.0  # whole words only
    assert answer_match("They came from Denmark, Iceland, and Norway.", ["Denmark, Iceland and Norway"]) == 1.0
    assert answer_match("Anything", []) is None
    assert answer_recall("King Charles signed it.", ["King Charles III"]) == pytest.approx(2 / 3)
    assert answer_recall("Rollo", ["the King Charles III", "Rollo"]) == 1.0
    assert answer_recall("x", []) is None
    with pytest.raises(ValueError, match="list of strings"):
        answer_match("x", "911")
    # a decimal point is part of the number: a response that moves it does not match
    assert answer_match("The trail is 35 km long.", ["3.5 km"]) == 0.0
    assert answer_match("A ticket costs $75.0.", ["$7.50"]) == 0.0
    assert answer_match("The trail is 3.5 km long.", ["3.5 km"]) == 1.0
    assert answer_match("A ticket costs $7.50.", ["$7.50"]) == 1.0
    assert answer_match("About 1,000 people came.", ["1000 people"]) == 1.0  # a thousands comma is not a point


def test_recited_share_counts_words_past_the_answering_sentence():
    response = "It was founded in 911. Rollo led the Norse raiders. They came from Denmark."
    assert recited_share(response, ["911"]) == pytest.approx(9 / 14)
    assert recited_share(response, ["Rollo"]) == pytest.approx(4 / 14)
    assert recited_share("Just one sentence here.", None) == 0.0
    assert recited_share("", ["x"]) is None
    assert response_words(response) == 14


@pytest.mark.parametrize("response", [
    "The document doesn't mention Sunday hours.",
    "I'm not sure, the page does not say.",
    "There is no information about the price of a day pass.",
    "That isn't specified.",
    "Sorry, I couldn't find anything about parking.",
    "I don't know. I'm not sure.",
    "I don't know. I think the page doesn't say.",
    "I think it opens at 9. Actually, I'm not sure, the page does not say.",
    "I don't know. Maybe ask at the front desk.",
    "I'm not sure. It might be worth asking the staff.",
    "I don't know. I think it's best to call them.",
    "No idea, sorry.",
    "Not sure.",
    "There's no way to tell from the passage.",
    "Hard to say from the article.",
    "The article does not answer this question.",
    "The flyer lists the opening hours and the address, but it says nothing about gluten-free bread.",
    "Can't say from this.",
    "The pamphlet covers when the tower was built, but not who designed it.",
    "The page doesn't list the fee, but it says to ask at the front desk.",
    "The timetable only covers the weekday buses, not the Sunday service.",
    "The review talks about the food and the decor but not the prices.",
    "That isn't something the flyer specifies.",
    "No clue, sorry.",
    "I don't have that; the newsletter only lists the spring term dates.",
    "The events page only gives the date and price of the workshop, not an age range.",
    "The fixture list gives the opponents and the venue but no kick-off time.",
])
def test_abstentions(response):
    assert abstains(response)


@pytest.mark.parametrize("response", [
    "No, the museum is not open on Mondays.",
    "The park doesn't allow dogs.",
    "He did not win the election.",
    "I'm not sure, but I think it opens at 9 am.",
    "I don't know, but I'm pretty sure it was Bohemond who led them.",
    "It opens at 9 am on weekdays.",
    "I don't know. I think it was made out of silver.",
    "I'm not sure. Maybe it was Bohemond who led them.",
    "I don't know, I'm not sure. It might have been in 1066.",
    "I'm not sure. My guess is 1066.",
    "I have no idea. Maybe 1066?",
    "It is hard to say goodbye to summer, but the pool closes on 1 September.",
    "There is no way to get there by train.",
    "He did not answer the phone.",
    "It's hard to say for sure from this, but it looks like they deliver within the city.",
    "The document doesn't give an exact date, but it says the lighthouse was finished in the 1850s.",
    "The fare page doesn't say. My best estimate would be 28 inches.",
    "The brochure doesn't state the price. It's probably around 50 euros.",
    "The menu lists the lunch prices but not the dinner ones: lunch is 12 euros.",
    "I don't have that problem with the app.",
    "No, the café doesn't take cards.",
])
def test_answers_are_not_abstentions(response):
    assert not abstains(response)


POOL_QUESTION = "Is the pool open on Sundays?"


@pytest.mark.parametrize("response, expected", [
    # an answer, then a hedge about something the user did not ask
    ("Yes, it opens at 10 am on Sundays, though the page doesn't say whether lanes can be booked.", False),
    ("It opens at 10 am on Sundays. The page doesn't mention the price of a swim, though.", False),
    # the hedge is about what was asked
    ("It opens at 10 am on weekdays, but the page doesn't say whether it is open on Sundays.", True),
    # no answer before the hedge: a preamble, or facts that answer nothing
    ("Sorry, I'm not able to answer that from the leisure centre's leaflet.", True),
    ("The leaflet describes the sauna and the gym, but it doesn't mention the lanes.", True),
    # "unknown" and "unclear" say of what comes before them that it is not told
    ("Yes, it opens at 10 am on Sundays; the architect is unknown.", False),
    ("The pool, whose architect is unclear, opens at 10 am on Sundays.", False),
    ("Yes, it opens at 10 am on Sundays. Who designed it is unknown.", False),
    ("Whether it opens on Sundays is unclear.", True),
    ("It opens at 10 am on weekdays, but Sunday opening is unknown.", True),
])
def test_a_hedge_about_a_side_detail_after_an_answer(response, expected):
    """Given the question, the hedge must be about it to make the response an abstention; without
    the question every hedge counts, as before."""
    assert abstains(response, POOL_QUESTION) is expected
    assert abstains(response)


def test_a_question_that_is_not_text_is_refused():
    with pytest.raises(ValueError, match="question as a string"):
        abstains("I'm not sure.", ["Is it open?"])


@pytest.mark.parametrize("question, response, expected", [
    # the answer after a hedge about something else
    ("Is the fun run still on this Sunday?",
     "The notice doesn't give a reason, but it does say the run is postponed to 12 May.", False),
    # the same shape, hedging on what was asked: the facts after it answer nothing
    ("When did the shop open?", "It doesn't say when it opened, but it does list the hours as 9 to 5.", True),
    # a clause that only says what the source covers is no answer, however specific
    ("Who won the 1987 regatta?", "The booklet mentions the 1987 regatta was held in rain, but it doesn't name the winner.",
     True),
    ("Why was the concert cancelled?", "The notice doesn't go into that.", True),
    ("What is the pass mark?", "That detail is missing from the guide you shared.", True),
    ("Who is the head chef?", "The review praises the kitchen but never names the chef.", True),
    # a second hedge in the sentence, about what was asked
    ("Is the museum open on Boxing Day?", "It opens 10 to 5 daily, but there's no mention of holiday closures, "
     "so I can't confirm Boxing Day.", True),
    ("What time is check-out?", "Check-out is by 11am, though the page doesn't mention late check-out and "
     "doesn't say if breakfast is included.", False),
    ("How much is a new card?", "I'm not completely certain, but the fees table seems to list it at 2.50 pounds.", False),
])
def test_hedges_beside_answers_and_what_the_source_covers(question, response, expected):
    assert abstains(response, question) is expected


@pytest.mark.parametrize("question, response, expected", [
    # a verb of having, negated, answers: what does not include is the thing asked about
    ("Does the warranty cover water damage?", "The warranty doesn't cover water damage.", False),
    ("Is breakfast included?", "It doesn't include breakfast.", False),
    ("Is parking free?", "Parking is not included.", False),
    ("Are batteries in the box?", "The kit does not contain batteries.", False),
    ("Is VAT in the price?", "The price doesn't include VAT.", False),
    ("Does it cover theft?", "It doesn't cover that.", False),
    ("Is a meal included on this flight?", "No. Your booking confirmation shows a Basic fare, which doesn't include "
     "meals, but you can buy snacks on board.", False),
    # ... and hedges where the source does not include, or what is not included is information
    ("What does it cost?", "The document doesn't include prices.", True),
    ("Why was it cancelled?", "It doesn't provide a reason.", True),
    ("When does it start?", "The exact times aren't included.", True),
    ("Can I freeze this soup?", "The recipe doesn't cover freezing, I'm afraid.", True),
    ("Can I bring my bike?", "I'm sorry, but the information provided doesn't cover bicycle rules on the tram.", True),
    ("Are barbecues allowed?", "I can only go by the park rules page you shared, and it doesn't cover barbecues at all.",
     True),
    ("Is there a bus?", "I went through the handbook, but transport isn't covered in it.", True),
    # other wordings
    ("Does the warranty cover water damage?", "The warranty runs for 24 months and covers manufacturing defects. "
     "Water damage isn't mentioned either way.", True),
    ("Are under-16s allowed?", "Hmm, there's nothing about age restrictions in the ticket terms.", True),
    ("Why was I charged?", "The statement shows a £15 debit on 3 March, but it doesn't explain what it was for.", True),
    ("Is the school closed on Friday?", "The letter doesn't explain why, but yes, the school is closed on Friday.", False),
    # yes or no in other words beside a side detail
    ("Is parking free at the venue?", "Looks like it: the invitation says 'free parking on site'. It doesn't say how "
     "many spaces there are.", False),
    ("Is the risotto vegetarian?", "Not as written. The menu says it's made with chicken stock. It doesn't say "
     "whether the kitchen can swap it out.", False),
    # the twelfth set's wordings
    ("What time is the meeting?", "Her email confirms it's on Thursday in Room 4B, but she never actually says what "
     "time it starts.", True),
    ("Is there a dress code?", "hmm, nope, the invite just has the date, the venue and the RSVP bit. nothing on what "
     "to wear", True),
    ("Why is my pay lower this month?", "Your payslip shows gross pay of £2,410 and £1,876 net, so I can't work out "
     "from it why your pay has dropped.", True),
    ("Am I covered?", "Good question, but I honestly can't tell from this policy.", True),
    ("whats the zoom link", "not in there, sorry - she says she'll send it separately", True),
    ("Why did my bill go up?", "The bill shows a total of £318, but it doesn't tell me why it's higher than before.",
     True),
    # a hedge of another kind of thing than the question asks for is a side detail
    ("When does the pool open on Sundays?", "It opens at 10 on Sundays, though the page doesn't say why it closes "
     "early.", False),
    # the thirteenth and fourteenth sets' wordings
    ("How much is the membership?", "Sorry, the timetable has no prices on it.", True),
    ("Is there a test?", "The test shows no infection.", False),
    ("Are batteries in the box?", "The kit has no batteries.", False),
    ("What's the RSVP email?", "There's a reply-by date of 30 June, but no email address is given.", True),
    ("How long does the battery last?", "The sheet gives 5000 mAh and a 90-minute charge, but it never quotes a "
     "runtime.", True),
    ("When is the deadline to appeal?", "The letter doesn't set out any time limit for challenging it.", True),
    ("Who teaches the 7pm class?", "Spin is on Tuesdays at 7pm in Studio 2, but the instructor column is blank.", True),
    ("Is the boiler gas or electric?", "The heating type isn't specified — the listing just has 'central heating'.",
     True),
    ("Should I bring a gift?", "nothing on there about presents, just the time (2-4pm) and the place", True),
    ("How much checked luggage can I take?", "Your flight leaves at 06:55. Baggage allowance doesn't appear on the "
     "itinerary.", True),
    ("What time do the restrictions end?", "The letter confirms your permit zone. Hours of operation are left out, "
     "though.", True),
    ("Is there a salad?", "Yes, though the tomatoes are left out.", False),
    ("Will there be food?", "The invitation lists no meal, so my read is that there won't be a proper dinner.", False),
    ("Where do I pay the fine?", "Online (the letter gives www.example.gov.uk/pay) or by phone on 0300 123 4567. "
     "No in-person option is listed.", False),
    ("Are dogs allowed?", "No. The listing states 'sorry, no pets' under house rules.", False),
    # a hedge of the kind asked for counts, unless the answer beside it gives a value of that kind
    ("How much does the club cost per session?", "It starts on 9 January and runs until 5:30pm. It doesn't list any "
     "fees.", True),
    ("How much is the buffet?", "The buffet costs €18 per adult; the menu doesn't mention a price for children.", False),
    # reported facts that are not about the question answer nothing
    ("Has my premium gone up?", "The renewal quotes £486 for the year ahead. Last year's figure isn't shown.", True),
    # the sixteenth set's wordings
    ("What's the notice period?", "I'm not seeing a cancellation section here.", True),
    ("Would my bike be covered?", "It only gives the premium, so whether a bike would be covered isn't something I "
     "can work out from it.", True),
    ("Is there a support act?", "The ticket says doors open at 7pm. No support act is named.", True),
    ("What's the total cost?", "It breaks down the cabinets but leaves flooring as TBD, so there isn't a total in "
     "here yet.", True),
    ("whats the wifi password", "the welcome letter has the key safe code, but I can't see a wifi password "
     "anywhere. it might be on a card inside the cottage?", True),
    ("What's the dose for a 30 lb child?", "For 24-35 lbs the chart on the label says 5 mL every 4-6 hours, no more "
     "than 5 doses in 24 hours.", False),
    ("Why is my tax code different?", "Your payslip shows the current code as 1185L, but it doesn't show last "
     "month's code or any reason for a change.", True),
])
def test_negative_answers_with_verbs_of_having_and_other_wordings(question, response, expected):
    assert abstains(response, question) is expected


def test_abstention_precision_and_recall_on_hand_labels():
    rows = _rows("abstention_labels.jsonl")
    precision, recall = _precision_recall([(abstains(r["response"]), r["abstains"]) for r in rows])
    assert precision >= 0.9 and recall >= 0.9, (precision, recall)  # measured: 1.0, 1.0 (the rules' development set)


# The abstention sets written apart from the rules, read with their questions, with floors under
# what they measure now (docs/results/correctness/detectors.json; docs/metrics.md, their history).
ABSTENTION_FLOORS = [
    ("abstention_fifth.jsonl", 0.9, 0.95),     # written apart, run once: 0.91 / 1.00; now 1.00 / 1.00
    ("abstention_sixth.jsonl", 0.85, 0.85),    # written apart, run once: 0.86 / 0.90; now 0.90 / 0.90
    ("abstention_seventh.jsonl", 0.95, 0.95),  # another annotator; first run 0.85 / 0.85, then read: 1.00 / 1.00
    ("abstention_eighth.jsonl", 0.9, 0.95),    # a second annotator; 0.70 / 0.80 before, then read: 0.95 / 1.00
    ("abstention_ninth.jsonl", 0.95, 0.95),    # a third annotator; 1.00 / 0.80 (before 0.75 / 0.75), read: 1.00 / 1.00
    ("abstention_tenth.jsonl", 0.95, 0.9),     # a fourth annotator, run once: 1.00 / 0.95 (before 0.76 / 0.80)
    ("abstention_eleventh.jsonl", 0.85, 0.85),  # a fifth annotator, run once: 0.72 / 0.65 (before 0.70 / 0.70);
                                                # read twice: 0.74 / 0.70, then 0.90 / 0.90
    ("abstention_twelfth.jsonl", 0.9, 0.9),    # a sixth annotator, run once before and after: 0.92 / 0.60, 0.93 / 0.65;
                                               # then read: 0.95 / 0.95
    ("abstention_thirteenth.jsonl", 0.9, 0.85),  # a seventh annotator, run once: 0.89 / 0.40 (before 0.875 / 0.35);
                                                 # then read: 1.00 / 0.90
    ("abstention_fourteenth.jsonl", 0.85, 0.75),  # an eighth annotator; 0.87 / 0.65 with the rules before this
                                                  # change, 0.78 / 0.35 after its first rounds; then read: 0.94 / 0.85
    ("abstention_fifteenth.jsonl", 0.9, 0.75),   # a ninth annotator, run once: 0.94 / 0.75 (before 0.93 / 0.70)
    ("abstention_sixteenth.jsonl", 0.95, 0.9),   # a tenth annotator, after every change, run once: 1.00 / 0.65
                                                 # (the rules before this release's changes: 1.00 / 0.45); then read
    ("abstention_seventeenth.jsonl", 0.9, 0.8),  # an eleventh, run once: 0.94 / 0.80 (0.94 / 0.75 before the
                                                 # sixteenth's changes, 0.92 / 0.60 before this release's)
    ("fact_integrity_nineteenth.jsonl", 0.9, 0.95),  # its 25 abstentions among 169 responses, run once: 0.96 / 1.00
    ("fact_integrity_twentieth.jsonl", 0.95, 0.85),  # its 28 abstentions among 181 responses, run once: 1.00 / 0.93
    ("fact_integrity_twentyfirst.jsonl", 0.75, 0.75),  # its 15 abstentions among 186, run once, never read: 0.80 / 0.80
]


@pytest.mark.parametrize("name, precision_floor, recall_floor", ABSTENTION_FLOORS)
def test_abstention_precision_and_recall_on_sets_written_apart(name, precision_floor, recall_floor):
    rows = _rows(name)
    precision, recall = _precision_recall([(abstains(r["response"], r["question"]), r["abstains"]) for r in rows])
    assert precision >= precision_floor and recall >= recall_floor, (name, precision, recall)


@pytest.mark.parametrize("response, reason", [
    ("The library is open Monday to Friday from 9 am to 4 pm.", None),   # 4 pm is Saturday's
    ("Members can borrow up to 3 books.", "counted noun"),               # 3 is the weeks
    ("It is open Saturdays from 10 am to Wednesday.", None),             # a garbled copy
    ("The annual pass costs 2 dollars.", "said of something else"),      # 2 dollars is a single ride
])
def test_wrong_facts_in_context(response, reason):
    wrong = wrong_facts(LIBRARY, ["When is it open?"], response)
    assert wrong, response
    if reason is not None:
        assert wrong[0]["reason"] == reason


@pytest.mark.parametrize("response", [
    "Members can borrow 12 books for three weeks.",
    "It closes at 8 pm on weekdays.",
    "The annual pass is 90 dollars.",
    "It costs $90 a year, or $2 per ride.",
    "Open 9 am to 8 pm on weekdays and 10 am to 4 pm on Saturdays.",
    "It opens at 10 in the morning on Saturdays.",
])
def test_facts_stated_as_the_document_states_them(response):
    assert wrong_facts(LIBRARY, ["When is it open?"], response) == []


def test_a_fact_copied_word_for_word_with_its_context_is_not_wrong():
    """The clause rules compare key words and misread long copied sentences; a verbatim copy with
    its context states the facts as the page does. A changed copy is still caught."""
    page = ("CityCycle, the bike-share scheme in Port Avery, charges $2.50 for a single ride of up to 30 "
            "minutes. Each extra 15 minutes costs $1. A day pass costs $9 and covers unlimited 45-minute rides.")
    question = ["How much is a ride?"]
    assert wrong_facts(page, question, "CityCycle, the bike-share scheme in Port Avery, charges $2.50 for a "
                                       "single ride of up to 30 minutes. Each extra 15 minutes costs $1.") == []
    changed = wrong_facts(page, question, "The scheme charges $2.50 for a single ride of up to 15 minutes.")
    assert "up to 15 minutes" in [u["text"] for u in changed]
    # the copied context must be the fact's own: "from 9 am to 4 pm" is no copy of a page with 9 am to 8 pm
    assert wrong_facts(LIBRARY, ["When is it open on weekdays?"], "It is open Monday to Friday from 9 am to 4 pm.")


def test_a_fact_the_user_stated_is_not_wrong():
    assert wrong_facts(LIBRARY, ["I heard it opens at 7 am?"], "You said 7 am, but it opens at 9 am.") == []


def test_unsupported_units_of_fact_features_are_unchanged_by_context():
    # the context check is a separate measure: FaithScore's fitted features still count bare support
    features = fact_features(LIBRARY, [], "The library is open Monday to Friday from 9 am to 4 pm.")
    assert features["unsupported_numbers"] == 0.0


# Each hand-labelled wrong-fact set with floors under what it measures now
# (docs/results/correctness/detectors.json; docs/metrics.md gives each set's history).
WRONG_FACT_FLOORS = [
    ("fact_integrity_labels.jsonl", 0.9, 0.75),    # the rules' development set: 1.00 / 0.77
    ("fact_integrity_fifth.jsonl", 0.6, 0.55),     # written apart; first run 0.63 / 0.60, now 0.65 / 0.65
    ("fact_integrity_sixth.jsonl", 0.5, 0.6),      # written apart; first run 0.565 / 0.65, now 0.62 / 0.65
    ("fact_integrity_seventh.jsonl", 0.85, 0.8),   # written apart, more name swaps; 0.94 / 0.85
    ("fact_integrity_eighth.jsonl", 0.65, 0.7),    # names and numbers across an aside; first run 0.625 / 0.75,
                                                   # then read and the rules widened on it: 0.73 / 0.80
    ("fact_integrity_ninth.jsonl", 0.65, 0.65),    # written apart; 0.70 / 0.70 before and after, 0.74 / 0.70 now
    ("fact_integrity_tenth.jsonl", 0.7, 0.55),     # written apart after every change, run once: 0.75 / 0.60
    ("fact_integrity_eleventh.jsonl", 0.75, 0.9),  # another annotator; first run 0.71 / 0.75, then read: 0.79 / 0.95
    ("fact_integrity_twelfth.jsonl", 0.8, 0.55),   # a second annotator, run once before and after: 0.86 / 0.60
    ("fact_integrity_thirteenth.jsonl", 0.7, 0.8),   # a third annotator; 0.71 / 0.85 (before 0.64 / 0.70), read: 0.74
    ("fact_integrity_fourteenth.jsonl", 0.7, 0.75),  # a fourth annotator, after every change, run once: 0.73 / 0.80
    ("fact_integrity_fifteenth.jsonl", 0.75, 0.8),   # a fifth annotator, run once: 0.76 / 0.80 (before 0.75 / 0.75);
                                                     # then read: 0.90 / 0.85
    ("fact_integrity_sixteenth.jsonl", 0.55, 0.7),   # a sixth annotator, run once before and after: 0.565 / 0.65, 0.60 / 0.75
    ("fact_integrity_seventeenth.jsonl", 0.55, 0.7),  # a seventh, after every change, run once: 0.58 / 0.70 (before 0.545 / 0.60)
    ("fact_integrity_eighteenth.jsonl", 0.55, 0.85),  # an eighth, run once: 0.60 / 0.90 (before this release 0.57 / 0.85)
    ("fact_integrity_nineteenth.jsonl", 0.65, 0.7),   # a ninth, 169 cases: 0.60 / 0.64 at first; read, and times of
                                                      # day, ranges, measures and currencies widened on it: 0.68 / 0.73
    ("fact_integrity_twentieth.jsonl", 0.7, 0.7),     # a tenth, 181 cases, run once: 0.757 / 0.747; read: 0.836 / 0.813
    ("fact_integrity_twentyfirst.jsonl", 0.65, 0.6),  # an eleventh, 186 cases, half of the wrong ones a true value given
                                                      # to another question; never read: 0.727 / 0.495 before the
                                                      # bare-answer rule, 0.727 / 0.66 after, 0.733 / 0.68 with places,
                                                      # 0.73 / 0.67 without the question's verbs
]


@pytest.mark.parametrize("name, precision_floor, recall_floor", WRONG_FACT_FLOORS)
def test_wrong_fact_precision_and_recall_on_hand_labels(name, precision_floor, recall_floor):
    rows = _rows(name)
    pairs = [(bool(wrong_facts(r["document"], r["history"], r["response"])), r["wrong_fact"]) for r in rows]
    precision, recall = _precision_recall(pairs)
    assert precision >= precision_floor and recall >= recall_floor, (name, precision, recall)


GARDEN = ("The Tressaly Botanic Garden covers 19 hectares. Its Victorian glasshouse, built in 1872, is kept at "
          "26 degrees Celsius, while the alpine house is kept at 8 degrees Celsius. The rose garden was added in 1931.")


@pytest.mark.parametrize("response, wrong", [
    ("The Victorian glasshouse is kept at 26 degrees Celsius.", False),   # across the aside "built in 1872"
    ("The alpine house is kept at 8 degrees, while the Victorian glasshouse is kept at 26 degrees.", False),
    ("The Victorian glasshouse is kept at 8 degrees Celsius.", True),     # 8 degrees is the alpine house's
    ("The Victorian glasshouse was built in 1931.", True),                # 1931 is the rose garden's
])
def test_a_name_and_its_number_across_an_aside(response, wrong):
    """A name beside a number stands with it in the document across an aside with a number of its
    own; a clause break (", while ...") still separates them."""
    found = wrong_facts(GARDEN, ["Tell me about the glasshouses."], response)
    assert bool(found) == wrong, found


OFFICE = ("The Marrowfield line's single ticket costs 7.80 euros and a day return costs 12.50 euros. Doors open at "
          "7:00 pm and the concert starts at 7:45 pm. Bookings must be made at least 48 hours in advance, and "
          "cancellations within 7 days are not refunded. The resort has 34 runs across 410 hectares, served by 9 "
          "lifts. Night route N4 runs until 2:15 am on Fridays and Saturdays. The trains run from 1 April to "
          "31 October. Inside, it is 9°C all year.")


@pytest.mark.parametrize("response, reason", [
    ("A day return costs 7.80 euros.", "said of something else"),       # 7.80 is the single ticket
    ("The concert starts at 7:00 pm.", "said of something else"),       # a clock time outside every entity
    ("Cancellations within 48 hours are not refunded.", "said of something else"),  # 48 hours and 7 days swapped
    ("The night route runs until 2:15 am on Sundays.", "not in the sources"),
])
def test_a_value_said_of_something_else_is_caught(response, reason):
    wrong = wrong_facts(OFFICE, ["Can you tell me more?"], response)
    assert [u["reason"] for u in wrong][:1] == [reason], wrong


@pytest.mark.parametrize("response", [
    "A day return costs 12.50 euros, and a single is 7.80 euros.",
    "The concert starts at a quarter to eight, and doors open at 7:00 pm.",
    "There are nine lifts serving 34 runs.",                       # each number tied to its own noun
    "On Saturdays it runs until 2:15 am.",                          # "Fridays and Saturdays" is a list
    "The trains run from the start of April through to the end of October.",
    "It's a steady nine degrees Celsius inside.",
    "You have to book 48 hours ahead.",
])
def test_paraphrases_of_the_document_are_not_wrong(response):
    assert wrong_facts(OFFICE, ["Can you tell me more?"], response) == []


CLUB = ("Fenhollow Rowing Club was founded in 1921. Its head coach is Benedikt Orsolya, and the captain is "
        "Maren Tulliver. The boathouse was designed by the architect Ada Penrose.")


@pytest.mark.parametrize("response, wrong", [
    ("The head coach is Maren Tulliver.", True),            # she is the captain
    ("Benedikt Orsolya is the club's captain.", True),      # he is the head coach
    ("The head coach is Benedikt Orsolya.", False),
    ("Maren Tulliver captains the club, and Ada Penrose designed the boathouse.", False),
])
def test_a_name_said_of_someone_else_is_caught(response, wrong):
    found = wrong_facts(CLUB, ["Who is who at the club?"], response)
    assert bool(found) == wrong, found
    if wrong:
        assert found[0]["reason"] == "said of someone else"


CENTRE = ("Head instructor Marta Kowalski teaches the beginners' courses. Group bookings are handled by centre "
          "manager Dev Patel. The autumn play is written by Grace Whitman and directed by Martin Hale. The tigers "
          "are looked after by head keeper Maeve Tolland, and the penguin talk is given by keeper Rhys Obuya.")


@pytest.mark.parametrize("question, response, wrong", [
    # the name answering a "who" question is said of what the question asks
    ("Who should I talk to about a group booking?", "Get in touch with Marta Kowalski, our head instructor.", True),
    ("Who should I talk to about a group booking?", "Get in touch with Dev Patel, our centre manager.", False),
    # an appositive is weighed on its own: the right deed with the wrong role
    ("Who handles group bookings?", "Group bookings are handled by Dev Patel, our head instructor.", True),
    # a possessive name does not do what its clause says
    ("Who's directing the play?", "Martin Hale is directing Grace Whitman's play.", False),
    # a name the parser calls an organisation, after a role ("head keeper Maeve Tolland"), is a person
    ("Who looks after the tigers?", "The tigers are cared for by keeper Rhys Obuya.", True),
])
def test_each_thing_said_of_a_person_is_weighed(question, response, wrong):
    found = wrong_facts(CENTRE, [question], response)
    assert bool(found) == wrong, found


def test_a_title_or_an_abbreviation_ends_no_document_sentence():
    from pmi_decode.metrics.text import document_sentences, sentences

    text = ("Open at 9:30 a.m. and closed at 5 p.m. from April. Lab sessions are led by Dr. Marcus Idowu. "
            "It ends at 5 p.m. Next comes lunch.")
    assert document_sentences(text) == ["Open at 9:30 a.m. and closed at 5 p.m. from April.",
                                        "Lab sessions are led by Dr. Marcus Idowu.", "It ends at 5 p.m.", "Next comes lunch."]
    assert len(sentences(text)) == 7  # the plain splitter (responses, FaithScore's features) is unchanged
    # the name stays one with its title and its sentence, so the lab sessions are said of him
    page = ("BIO 214 is taught by Professor Lena Haugen, with lab sessions led by Dr. Marcus Idowu. "
            "Lectures are on Tuesdays.")
    assert wrong_facts(page, ["Who leads the lab sessions?"], "Dr. Marcus Idowu") == []


def test_amounts_in_millions_match_their_digits():
    from pmi_decode.metrics.fact_support import _compound_numbers

    assert _compound_numbers("£1.75m towards it") == "£1750000 towards it"
    assert _compound_numbers("2.4 million people, $3bn and £40k") == "2400000 people, $3000000000 and £40000"
    assert _compound_numbers("a 1.75m wall and a 5k run") == "a 1.75m wall and a 5k run"  # metres, kilometres
    page = "The developer will contribute £1,750,000 towards a new school. Profit was £2.4 million."
    assert wrong_facts(page, ["How much?"], "The developer will contribute £1.75m towards a new school.") == []
    assert wrong_facts(page, ["How much?"], "Profit was £2,400,000.") == []
    assert wrong_facts(page, ["How much?"], "The developer will contribute £1.5m towards a new school.")


def test_a_value_worked_out_in_one_step_from_the_document_is_not_invented():
    page = ("The roof appeal has raised £31,200 of its £45,000 target. Home students pay £12,400 a year and "
            "international students £26,900. A single bun is £1.40 and a dozen costs £15.")
    question = ["How much more is needed?"]
    assert wrong_facts(page, question, "The appeal still needs £13,800 to reach its target.") == []
    assert wrong_facts(page, question, "International students pay £14,500 more than home students.") == []
    # no word says it is worked out: an invented value stays invented
    assert wrong_facts(page, question, "The appeal has £13,800 in pledges.")
    # a wrong sum is still wrong, and small values are not taken on trust (15 + 1.40 = 16.40 by chance)
    assert wrong_facts(page, question, "The appeal still needs £13,900 to reach its target.")
    assert wrong_facts(page, question, "Twelve single buns would cost £16.40 in total.")


def test_number_words_with_hundreds_become_digits():
    from pmi_decode.metrics.fact_support import _compound_numbers

    assert _compound_numbers("two hundred and ten pounds") == "210 pounds"
    assert _compound_numbers("three hundred and forty-five") == "345"
    assert _compound_numbers("two hundred and 30 people") == "230 people"
    assert _compound_numbers("one thousand one hundred and fifty delegates") == "1150 delegates"
    assert _compound_numbers("three thousand and five") == "3005"
    assert _compound_numbers("twenty-one thousand fans") == "21000 fans"


BAKERY = ("Sourdough loaves cost £4.80, cinnamon buns £2.60 each, and a celebration cake for 12 people £38. "
          "'The Study' has a 60-minute time limit, 'Sunken Vault' a 75-minute limit, and 'Attic' a 50-minute limit.")


@pytest.mark.parametrize("response, wrong", [
    ("Cinnamon buns are £4.80 each.", True),                 # £4.80 is the sourdough loaf's
    ("Cinnamon buns are £2.60 each.", False),
    ("A sourdough loaf costs £4.80.", False),
    ("'Sunken Vault' has a 60-minute time limit.", True),    # 60 minutes is 'The Study''s
    ("'Sunken Vault' has a 75-minute limit.", False),
])
def test_a_value_from_the_next_item_of_a_list_is_said_of_something_else(response, wrong):
    """In a list of items and their values, the words after a value's comma belong to the next value."""
    found = wrong_facts(BAKERY, ["How much is it?"], response)
    assert bool(found) == wrong, found


def test_a_number_the_document_leaves_bare_may_name_what_it_counts():
    """"seats 85" at the end of its clause counts nothing named: "seats eighty-five people" says
    the same; "3 books" where the document says "12 books for 3 weeks" is still caught."""
    page = "The Net Loft, a former fish store, seats 85. The main hall seats 240 people."
    assert wrong_facts(page, ["How big is the Net Loft?"], "The Net Loft seats eighty-five people.") == []
    assert wrong_facts(LIBRARY, ["How many books?"], "Members can borrow up to 3 books.")


@pytest.mark.parametrize("name, every_answer_a_span", [("factual_dialogues.jsonl", True),
                                                        ("factual_dialogues_heldout.jsonl", False)])
def test_factual_dialogues_fixture_is_well_formed(name, every_answer_a_span):
    rows = _rows(name)
    assert len({r["id"] for r in rows}) == len(rows)
    assert len(rows) >= 30 and sum(not r["answerable"] for r in rows) >= 10
    for r in rows:
        assert r["history"] and all(isinstance(t, str) for t in r["history"])
        assert bool(r["answers"]) == r["answerable"]
        # the first reference answer is a span of the document; in the second set the others may be
        # written differently ("$60" for "60 dollars")
        for answer in r["answers"] if every_answer_a_span else r["answers"][:1]:
            assert answer in r["document"], (r["id"], answer)


def test_heldout_factual_dialogues_share_no_topic_or_document_with_the_first_set():
    first, heldout = _rows("factual_dialogues.jsonl"), _rows("factual_dialogues_heldout.jsonl")
    for key in ("id", "topic", "document"):
        assert not {r[key] for r in first} & {r[key] for r in heldout}, key


def test_correctness_measures_and_scoring_registry():
    records = [
        {"id": "a", "document": LIBRARY, "history": ["Until when is it open on weekdays?"], "answers": ["8 pm"],
         "answerable": True, "pmi_response": "Until 4 pm.", "plain_response": "It is open until 8 pm."},
        {"id": "b", "document": LIBRARY, "history": ["Is there a cafe?"], "answerable": False, "answers": [],
         "pmi_response": "The document doesn't say.", "plain_response": "Yes, there is a cafe on the 5th floor."},
    ]
    scored = score_records(records, ["correctness"])
    a, b = scored[0]["scores"], scored[1]["scores"]
    assert a["plain_response"]["answer_match"] == 1.0 and a["pmi_response"]["answer_match"] == 0.0
    assert b["pmi_response"]["asserts_unanswerable"] == 0.0 and b["plain_response"]["asserts_unanswerable"] == 1.0
    assert b["plain_response"]["wrong_numbers"] >= 1.0           # "5th" is in no source
    assert a["pmi_response"]["asserts_unanswerable"] is None
    with pytest.raises(ValueError, match="answerable: false"):
        score_records([dict(records[1], answers=["x"])], ["correctness"])
    rows = correctness_measures([LIBRARY], [["q"]], ["x"], answers=[["8 pm"]])
    assert rows[0]["answer_match"] == 0.0 and rows[0]["asserts_unanswerable"] is None


def test_answers_intact_needs_the_answer_and_no_wrong_fact_and_abstention_is_split_by_answerability():
    question = [["Until when is it open on weekdays?"]] * 3
    responses = ["It is open until 8 pm on weekdays.",
                 "On weekdays it is open until 8 pm. On weekdays it is open until 4 pm.",  # the answer, and a wrong one
                 "The page does not say."]
    rows = correctness_measures([LIBRARY] * 3, question, responses, answers=[["8 pm"]] * 3)
    assert [r["answer_match"] for r in rows] == [1.0, 1.0, 0.0]
    assert [r["answers_intact"] for r in rows] == [1.0, 0.0, 0.0]
    assert [r["abstains_answerable"] for r in rows] == [0.0, 0.0, 1.0]   # abstaining where the page answers
    unanswerable = correctness_measures([LIBRARY], [["Is there a cafe?"]], ["The page does not say."],
                                        answerable=[False])[0]
    assert unanswerable["answers_intact"] is None and unanswerable["abstains_answerable"] is None
    assert unanswerable["asserts_unanswerable"] == 0.0
    silent = correctness_measures([LIBRARY] * 3, [["Is there a cafe?"]] * 3, ["", "  ", "."], answerable=[False] * 3)
    assert [r["asserts_unanswerable"] for r in silent] == [0.0] * 3  # saying nothing asserts nothing
    assert [r["abstains"] for r in silent] == [0.0] * 3
    # answerable without references: abstention is counted, answer measures are undefined
    known = correctness_measures([LIBRARY], [["q"]], ["I don't know."], answerable=[True])[0]
    assert known["abstains_answerable"] == 1.0 and known["answers_intact"] is None


def test_squad2_loader_reads_the_official_format():
    from pmi_decode import load_dialogues

    records, report = load_dialogues("squad2", "dev", Path(__file__).parent / "fixtures" / "squad2",
                                     return_report=True)
    assert records and report.records == len(records)
    for r in records:
        assert r.history and len(r.history) == 1 and r.document
        assert r.meta["answerable"] == bool(r.meta["answers"])
        assert all(a in r.document for a in r.meta["answers"])
    assert any(not r.meta["answerable"] for r in records) and any(r.meta["answerable"] for r in records)
    with pytest.raises(ValueError, match="unknown split"):
        load_dialogues("squad2", "test", Path(__file__).parent / "fixtures" / "squad2")


def _script(relative: str, name: str):
    """An eval script, loaded as a module (the eval scripts are not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, Path(__file__).parents[1] / relative)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _correctness_table():
    return _script("eval/correctness_table.py", "correctness_table")


def test_detector_study_loads_the_rules_of_a_revision(monkeypatch):
    """--rules-of loads both detectors as a commit wrote them, beside the package (git's answer is
    stood in for by the files as they are, so the test needs no history)."""
    import types

    root = Path(__file__).parents[1]
    study = _script("eval/studies/correctness_detectors.py", "correctness_detectors")
    asked = []

    def git_show(command, **kwargs):
        asked.append(command)
        return types.SimpleNamespace(stdout=(root / command[2].split(":", 1)[1]).read_text(encoding="utf-8"))

    monkeypatch.setattr(study.subprocess, "run", git_show)
    then_abstains = study.rules_of("abc1234", "correctness").abstains
    then_wrong = study.rules_of("abc1234", "fact_support").wrong_facts
    assert [c[2] for c in asked] == ["abc1234:pmi_decode/metrics/correctness.py",
                                     "abc1234:pmi_decode/metrics/fact_support.py"]
    assert then_abstains is not abstains and then_wrong is not wrong_facts
    assert then_abstains("The document doesn't mention it.") and not then_abstains("It opens at 9 am.")
    assert then_wrong(LIBRARY, ["When?"], "It is open Monday to Friday from 9 am to 4 pm.")
    assert then_wrong(LIBRARY, ["When?"], "It closes at 8 pm on weekdays.") == []


def test_correctness_table_paired_bootstrap():
    module = _correctness_table()
    d = module.paired_bootstrap([0.0] * 10, [1.0] * 5 + [0.0] * 5)
    assert d["diff"] == 0.5 and d["low"] < 0.5 < d["high"] and d["n"] == 10
    assert module.paired_bootstrap([1.0, 1.0], [1.0, 1.0])["diff"] == 0.0
    base = {"id": "a", "document": LIBRARY, "history": ["Until when on weekdays?"], "answers": ["8 pm"],
            "answerable": True}
    files = {"defaults": [dict(base, plain_response="It is open until 8 pm.",
                                  pmi_response="On weekdays it is open until 4 pm.")],
             "other": [dict(base, pmi_response="Until 8 pm."), dict(base, id="b", pmi_response="x")]}
    systems, dialogues = module.systems_from_files(files)
    assert list(systems) == ["plain", "defaults", "other"] and [d["id"] for d in dialogues] == ["a"]
    scores = module.score_systems(systems, ["correctness"])
    table = module.table(scores)
    match = table["answer_match"]["systems"]
    assert match["plain"]["mean"] == 1.0 and match["defaults"]["vs_plain"]["diff"] == -1.0
    assert match["other"]["vs_plain"]["diff"] == 0.0
    assert table["wrong_numbers"]["systems"]["defaults"]["mean"] == 1.0   # "4 pm" is Saturday's closing time
    assert table["wrong_facts"]["systems"]["defaults"]["mean"] == 1.0     # a number or a name: one response
    assert table["wrong_facts"]["systems"]["plain"]["mean"] == 0.0
    met = module.bars(table)
    assert not met["defaults"]["match >= plain - 0.02"] and not met["defaults"]["wrong number or name <= plain"]
    assert met["other"]["match >= plain - 0.02"] and met["other"]["wrong numbers <= plain"]
    text = module.markdown("t", table, {}, "cmd")
    assert "Issue 24's bars" in text and any(line.startswith("| defaults |") and "**no**" in line
                                              for line in text.splitlines())
    with pytest.raises(SystemExit, match="--compare"):
        module.systems_from_files({"other": files["other"]})


def test_correctness_table_pools_files_joined_with_plus(tmp_path):
    from pmi_decode.batch.scoring import read_jsonl

    module = _correctness_table()
    first, second, again = tmp_path / "first.jsonl", tmp_path / "second.jsonl", tmp_path / "again.jsonl"
    row = {"document": LIBRARY, "history": ["Until when on weekdays?"]}
    first.write_text(json.dumps(dict(row, id="a", pmi_response="x")) + "\n")
    second.write_text("".join(json.dumps(dict(row, id=i, pmi_response=i)) + "\n" for i in "bc"))
    again.write_text(json.dumps(dict(row, id="a", pmi_response="w")) + "\n")
    name, records = module.read_system(f"{first}+{second}", read_jsonl)
    assert name == "first+second" and [r["id"] for r in records] == ["a", "b", "c"]
    assert module.read_system(str(second), read_jsonl)[0] == "second"
    with pytest.raises(SystemExit, match="share dialogue ids"):
        module.read_system(f"{first}+{again}", read_jsonl)
    (tmp_path / "other").mkdir()
    twin, plain = tmp_path / "other" / "first.jsonl", tmp_path / "plain.jsonl"
    for path in (twin, plain):
        path.write_text(first.read_text())
    assert list(module.read_systems([str(first), str(second)], read_jsonl)) == ["first", "second"]
    with pytest.raises(SystemExit, match="would be named 'first', as another input"):
        module.read_systems([str(first), str(twin)], read_jsonl)  # one would replace the other
    with pytest.raises(SystemExit, match="as plain decoding's row"):
        module.read_systems([str(plain)], read_jsonl)


def test_detectors_on_the_untouched_final_sets():
    """Floors under the figures docs/metrics.md reports for the final sets."""
    facts = _rows("fact_integrity_final.jsonl")
    p, r = _precision_recall([(bool(wrong_facts(x["document"], x["history"], x["response"])), x["wrong_fact"])
                              for x in facts])
    assert p >= 0.6 and r >= 0.6, (p, r)
    said = _rows("abstention_final.jsonl")
    p, r = _precision_recall([(abstains(x["response"]), x["abstains"]) for x in said])
    assert p >= 0.9 and r >= 0.85, (p, r)


def test_abstention_on_the_fourth_to_sixth_sets():
    """Written apart from the rules: the fourth's errors were read and the rules widened on them
    (0.74 / 0.85 at its first run, 0.90 / 0.95 after); the fifth was run once, after (0.91 / 1.00;
    the rules before the widening: 0.83 / 1.00); the sixth, written after, once (0.86 / 0.90)."""
    for name, floor in (("abstention_fourth.jsonl", (0.85, 0.9)), ("abstention_fifth.jsonl", (0.85, 0.95)),
                        ("abstention_sixth.jsonl", (0.8, 0.85))):
        rows = _rows(name)
        p, r = _precision_recall([(abstains(x["response"]), x["abstains"]) for x in rows])
        assert p >= floor[0] and r >= floor[1], (name, p, r)


def test_correctness_table_takes_plain_decoding_from_plain_file():
    module = _correctness_table()
    base = {"document": LIBRARY, "history": ["Until when on weekdays?"], "answers": ["8 pm"], "answerable": True}
    plain = [dict(base, id="a", plain_response="Until 8 pm.", pmi_response="old"),
             dict(base, id="b", plain_response="Until 4 pm.", pmi_response="old")]
    files = {"new": [dict(base, id="a", pmi_response="8 pm", plain_response="ignored"),
                     dict(base, id="b", pmi_response="8 pm", plain_response="ignored")]}
    systems, _ = module.systems_from_files(files, plain)
    assert list(systems) == ["plain", "new"]
    assert [r["response_text"] for r in systems["plain"].values()] == ["Until 8 pm.", "Until 4 pm."]
    assert [r["response_text"] for r in systems["new"].values()] == ["8 pm", "8 pm"]
    with pytest.raises(SystemExit, match="--plain"):
        module.systems_from_files(files, [dict(base, id="a", pmi_response="x")])
    other_dialogue = [dict(plain[0], history=["Until when on Saturdays?"]), plain[1]]
    with pytest.raises(SystemExit, match="not the same dialogues"):
        module.systems_from_files(files, other_dialogue)


GYM = ("FitFoundry charges £32 a month for off-peak membership. Head coach Daniel Reyes runs the strength "
       "classes, and Sofia Lindqvist leads the yoga sessions at 6:20. The museum-style climbing wall costs £12.50 a visit "
       "and the sauna six pounds. The summer offer runs until 28 June.")


@pytest.mark.parametrize("response, wrong", [
    ("Strength classes are run by our head coach, Sofia Lindqvist.", True),        # the appositive: Reyes's role
    ("You should ask Sofia Lindqvist, who runs the strength classes.", True),      # the relative clause
    ("Strength classes are run by our head coach, Daniel Reyes.", False),
    ("Sofia Lindqvist, who leads the yoga sessions, is lovely.", False),
    ("The instructors are Daniel Reyes, Sofia Lindqvist and others.", False),      # a list is no appositive
    ("The climbing wall costs £12 a visit.", True),                                # £12.50 offers no £12
    ("The climbing wall costs twelve pounds fifty a visit.", False),
    ("The summer offer runs until the twenty-eighth of June.", False),
    ("The summer offer runs until the twenty-seventh of June.", True),
    ("The yoga sessions start at twenty past six.", False),
    ("The yoga sessions start at ten past six.", True),
    ("Yes, Sofia Lindqvist runs them.", True),                                   # what she does: Reyes's
    ("Yes, Daniel Reyes runs them.", False),
])
def test_names_beside_their_roles_and_numbers_in_words(response, wrong):
    found = wrong_facts(GYM, ["Tell me about the gym."], response)
    assert bool(found) == wrong, found


HOURS = ("The library is open from 9 am to 8 pm on weekdays and from 10 am to 4 pm on Saturdays. Members can "
         "borrow up to 12 books for 3 weeks. The pool is 25 metres long. Doors open at 7:00 pm and the talk "
         "starts at 7:45 pm. A day pass costs $7.50 to buy.")


@pytest.mark.parametrize("response, reason", [
    # a range's other end stands between a time and what it is said of, in either word order
    ("It opens at 9 am on weekdays.", None),
    ("It opens at 10 am on Saturdays.", None),
    ("On Saturdays it opens at 10 am.", None),
    ("It opens at 10 am on weekdays.", "counted noun"),
    # a clock time on the hour is its hour; other minutes are a time of their own
    ("It opens at 9:00 am.", None),
    ("Doors open at 7 pm.", None),
    ("The talk starts at 7 pm.", "said of something else"),
    ("The talk starts at 7:45 pm.", None),
    # another measure of the same kind after the document's number
    ("You can borrow 12 books for 3 months.", "counted noun"),
    ("You can borrow 12 books for 3 weeks.", None),
    ("The pool is 25 feet long.", "counted noun"),
    # another currency than the document's at every place it states the amount
    ("Entry costs £7.50.", "another currency"),
    ("Entry costs 7.50 euros.", "another currency"),
    ("Entry costs 7.50 dollars.", None),
])
def test_times_ranges_and_measures_are_read_as_the_document_states_them(response, reason):
    wrong = wrong_facts(HOURS, ["Can you tell me about it?"], response)
    assert [u["reason"] for u in wrong][:1] == ([reason] if reason else []), wrong


CLOCKS = "The school day runs from 8:50 to 15:20. The 08:41 train is the last one. The bar opens at 9 pm."


@pytest.mark.parametrize("response, wrong", [
    ("School finishes at 3:20 pm.", False),      # 15:20 on a 12-hour clock
    ("School finishes at 3:20.", False),         # a time that says neither half of the day
    ("School finishes at 3:20 am.", True),
    ("School starts at 8:50 am.", False),        # the document's 8:50 says neither
    ("The last train is the 8:41.", False),      # 08:41 without its leading zero
    ("The last train is the 20:41.", True),      # 08:41 is a 24-hour time
    ("The last train is the 8:41 pm.", True),
    ("The bar opens at 21:00.", False),
    ("The bar opens at 9 in the evening.", False),
    ("The bar opens at 9 am.", True),
])
def test_times_of_day_match_across_clocks_and_not_across_halves_of_the_day(response, wrong):
    found = wrong_facts(CLOCKS, ["When?"], response)
    assert bool(found) == wrong, found


def test_a_middle_initial_or_a_degree_ends_no_document_sentence():
    from pmi_decode.metrics.text import document_sentences

    text = ("It was launched by Senh Duong, Patrick Y. Lee, and Stephen Wang. They were Ph.D. students then. "
            "It was Plan B. Then it grew.")
    assert document_sentences(text) == ["It was launched by Senh Duong, Patrick Y. Lee, and Stephen Wang.",
                                        "They were Ph.D. students then.", "It was Plan B.", "Then it grew."]
    assert wrong_facts(text, ["Who launched it?"], "Patrick Y. Lee launched it.") == []


PIZZA = ("A survey from 2004 showed that Norwegians eat the most frozen pizza (5.4 kg per person a year). "
         "Volleyball teams have six players each. A surviving divorced spouse qualifies if the marriage lasted "
         "10 years. You can earn up to four credits each year.")


@pytest.mark.parametrize("response, wrong", [
    ("Norwegians, according to a 2004 survey.", False),     # a year after an article counts no noun
    ("Norwegians, according to a 2005 survey.", True),
    ("Each volleyball team has half a dozen players.", False),
    ("Each volleyball team has a dozen players.", True),
    ("Yes, if the two of you were married for 10 years.", False),   # "the two of you" is no count
    ("You max out at four credits each year.", False),      # a lower-case word the parser calls a name
    ("You max out at five credits each year.", True),
])
def test_what_a_reader_takes_as_no_fact_is_not_flagged(response, wrong):
    found = wrong_facts(PIZZA, ["Tell me more."], response)
    assert bool(found) == wrong, found


@pytest.mark.parametrize("response, said", [
    ("Sorry, I don't have that number.", True),
    ("I don't have the exact date, sorry.", True),
    ("I don't have time to watch many films.", False),
])
def test_not_having_the_asked_value_is_an_abstention(response, said):
    assert abstains(response, "What is the phone number?") == said


ROVERS = ("The Harbour Rovers were founded in 1921 and first played at Mill Lane. The club moved to Quay Park "
        "in 1964, and the ground was renamed the Rovers Arena in 1998. A season ticket costs £240; a single "
        "match ticket costs £18.")


@pytest.mark.parametrize("question, response, wrong", [
    ("When did the club move to Quay Park?", "In 1964.", False),
    ("When did the club move to Quay Park?", "In 1998.", True),      # the rename's year, given to the move
    ("When did the club move to Quay Park?", "1921.", True),         # the founding year
    ("How much is a season ticket?", "£240.", False),
    ("How much is a season ticket?", "£18.", True),                  # the single ticket's price
    ("Tell me about the club.", "In 1998.", False),                  # no question a value answers: not weighed
])
def test_a_bare_answer_is_weighed_by_what_the_question_asks(question, response, wrong):
    """A bare answer says nothing of its own value: the question's words stand in for its clause."""
    found = wrong_facts(ROVERS, [question], response)
    assert bool(found) == wrong, found


SINGER = ("Sheeran was born in Halifax, West Yorkshire, and raised in Framlingham, Suffolk. A survey from 2004 "
          "showed that Norwegians eat the most frozen pizza (5.4 kg per person a year), followed by Germans.")


@pytest.mark.parametrize("question, response, wrong", [
    ("Where was he born?", "He was born in Halifax.", False),
    ("Where was he born?", "He was born in Framlingham.", True),   # where he was raised
    ("Where was he raised?", "He grew up in Framlingham, Suffolk.", False),
    ("Who eats the most frozen pizza?", "Norwegians eat the most.", False),
    ("Who eats the most frozen pizza?", "The Germans eat the most.", True),  # they come second
])
def test_a_place_said_of_another_place_is_caught(question, response, wrong):
    """Places and peoples are weighed against the document's others, as people are."""
    found = wrong_facts(SINGER, [question], response)
    assert bool(found) == wrong, found


@pytest.mark.parametrize("response, answer, match", [
    ("It was on 3 May 2021.", "May 3, 2021", 1.0),
    ("It was the 3rd of May.", "May 3", 1.0),
    ("You need 1360 dollars.", "$1,360", 1.0),
    ("You need $1,360.", "1360 dollars", 1.0),
    ("There are three of them.", "3", 1.0),
    ("It opens at 9am.", "9 am", 1.0),
    ("The tower is 330 metres tall.", "330 meters", 1.0),
    ("It costs two hundred and ten dollars.", "$210", 1.0),
    ("About 14 percent.", "14%", 1.0),
    ("The code is 1,3,60.", "$1,360", 0.0),   # not a thousands separator
    ("It costs $13.60.", "$1,360", 0.0),
    ("It opens at 4 am.", "4 pm", 0.0),
    ("In 1960.", "1959", 0.0),
    ("It is 35 km away.", "3.5 km", 0.0),
    ("It was founded in the 1990s.", "1990", 0.0),  # a decade is no year
    ("No one knows.", "1", 0.0),                     # "one" stays a word
    ("The file is an MP3.", "3", 0.0),
    ("James Bond 007", "7", 0.0),                    # digits as written
])
def test_an_answer_written_another_way_matches(response, answer, match):
    assert answer_match(response, [answer]) == match


@pytest.mark.parametrize("kwargs, message", [
    (dict(answers=["1959"]), r"answers\[0\] must be a list of reference answers"),  # would be split into characters
    (dict(answerable=[0]), r"answerable\[0\] must be true, false or None"),
    (dict(histories=None), "histories must be a list with one list of turns per row"),
    (dict(histories=["When?"]), r"histories\[0\] must be a list of turns"),
    (dict(responses=[None]), r"responses\[0\] must be a string"),
])
def test_correctness_measures_refuse_misshapen_inputs(kwargs, message):
    from pmi_decode.metrics.correctness import correctness_measures

    args = dict(documents=["It was recorded in 1959."], histories=[["When was it recorded?"]],
                responses=["It was recorded in 1995 and it has 5 tracks."])
    with pytest.raises(ValueError, match=message):
        correctness_measures(**{**args, **kwargs})


@pytest.mark.parametrize("response, wrong", [
    ("It closes at 4 pm on Saturdays.", False),       # the end of "10 am to 4 pm", after "Saturdays"
    ("It is open until 4 pm on Saturdays.", False),
    ("It closes at 8 pm on Saturdays.", True),        # the weekdays' closing time
    ("On weekdays it closes at 4 pm.", True),
])
def test_the_end_of_a_range_stands_with_what_comes_before_its_start(response, wrong):
    page = "It opens 9 am to 8 pm on weekdays. On Saturdays it opens 10 am to 4 pm."
    found = wrong_facts(page, ["When does it close?"], response)
    assert bool(found) == wrong, found


def test_a_question_s_verb_does_not_weigh_a_bare_answer():
    """"start playing" in the question matches the document's "started playing in the NFL in 1921";
    the verb says nothing of which value answers (a clause's verbs are not weighed either)."""
    page = "The Packers were founded in 1919 and started playing in the NFL in 1921. They moved to Lambeau Field in 1957."
    assert wrong_facts(page, ["When did they start playing at their current stadium?"], "1957.") == []


def test_a_numpy_bool_is_taken_as_answerable():
    import numpy as np

    from pmi_decode.metrics.correctness import correctness_measures

    row = correctness_measures(["It opens at 9."], [["When?"]], ["I don't know."], answerable=[np.True_])[0]
    assert row["abstains_answerable"] == 1.0
