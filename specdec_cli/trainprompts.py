"""Training prompts for `specdec distill`: templated instructions, none from the benchmark suite.

The draft learns from the target's own answers, so what matters is that the prompts lead the
target through the kinds of text it is asked for (conversation, explanations, how-tos,
translation, code, arithmetic, short writing), not that they are clever. Templates x subjects
give a few thousand distinct prompts, in a fixed order; `distill` shuffles them with its seed.
The benchmark prompts (prompts.SUITE) are never among them (tests check it).
"""

from __future__ import annotations

from .prompts import Prompt

TOPICS = [
    "volcanoes", "photosynthesis", "the water cycle", "black holes", "the printing press", "honeybees",
    "compound interest", "the immune system", "electric cars", "the Roman Empire", "coral reefs",
    "machine learning", "the French Revolution", "earthquakes", "vaccines", "solar panels", "the moon landing",
    "plate tectonics", "the human heart", "recycling", "the stock market", "climate change", "DNA",
    "the internet", "ancient Egypt", "rainbows", "gravity", "the Silk Road", "tides", "antibiotics",
    "wind turbines", "the Renaissance", "sleep", "memory", "inflation", "glaciers", "the periodic table",
    "bridges", "democracy", "penguins", "coffee", "chess", "the Olympic Games", "jazz music", "deserts",
    "nuclear power", "bacteria", "the Great Wall of China", "batteries", "clouds",
]
SKILLS = [
    "cook rice", "write a cover letter", "change a flat tire", "start running", "save money each month",
    "learn a new language", "plant tomatoes", "make a budget", "study for an exam", "give a short speech",
    "clean a laptop keyboard", "brew tea", "organize a closet", "train a puppy", "take better photos",
    "write a thank-you note", "fix a leaky faucet", "plan a road trip", "meditate", "make pancakes",
    "set up a home aquarium", "back up my files", "stretch after exercise", "paint a wall", "keep a journal",
]
SITUATIONS = [
    "I just moved to a new city and I don't know anyone.", "My roommate leaves dishes in the sink every day.",
    "I can't decide between two job offers.", "I want to read more books this year.",
    "My friend forgot my birthday.", "I have too many browser tabs open and feel overwhelmed.",
    "I'm planning a picnic for ten people.", "I keep procrastinating on my homework.",
    "I want to surprise my sister for her graduation.", "I'm bored on a long train ride.",
    "My plants keep dying.", "I want to get better at chess.", "I have a presentation tomorrow.",
    "I'm trying to drink less soda.", "I want to learn to cook healthy meals.",
    "My neighbour's dog barks all night.", "I'm visiting Japan for the first time.",
    "I can't fall asleep at night.", "I want to start a small vegetable garden.", "I feel stuck in my career.",
]
SENTENCES = [
    "The library opens at nine in the morning.", "My brother plays the piano every evening.",
    "We are going to the beach this weekend.", "This soup is too salty.", "Please close the door behind you.",
    "The museum is closed on Mondays.", "I lost my umbrella on the bus.", "How much does this jacket cost?",
    "The children are playing in the garden.", "It will probably rain tomorrow.", "Can you help me carry these boxes?",
    "She has lived in this town for ten years.", "The train was late again.", "I would like to book a table for two.",
    "Our teacher gave us a lot of homework.", "The bakery sells fresh bread every morning.",
    "Do you know where the post office is?", "My phone battery is almost empty.",
    "We watched a film about space last night.", "The river is very cold in winter.",
]
LANGUAGES = ["French", "Spanish", "German", "Italian", "Portuguese", "Dutch"]
CODE_TASKS = [
    "reverses a list without using reverse()", "counts the vowels in a string", "finds the largest number in a list",
    "removes duplicates from a list while keeping order", "checks whether a number is prime",
    "converts Celsius to Fahrenheit", "merges two sorted lists", "counts word frequencies in a sentence",
    "returns the factorial of n", "flattens a nested list", "checks whether two strings are anagrams",
    "computes the average of a list of numbers", "finds the second smallest element of a list",
    "capitalizes the first letter of every word", "returns the sum of the digits of an integer",
    "splits a list into chunks of size n", "computes the greatest common divisor of two numbers",
    "reads a text file and counts its lines", "validates that a string is a simple email address",
    "rotates a list by k positions", "transposes a matrix given as a list of lists", "returns all even numbers from a list",
    "implements binary search on a sorted list", "converts a binary string to an integer",
    "finds the longest word in a sentence",
]
LANGS_CODE = ["Python", "JavaScript", "Python", "Python", "Go", "Python", "Rust", "Java"]
NUMBERS = [(12, 7), (45, 18), (36, 24), (81, 9), (150, 35), (64, 16), (27, 13), (98, 42), (120, 15), (55, 11),
           (14, 19), (33, 21), (72, 8), (250, 40), (19, 6)]

TEMPLATES = {
    "qa": [
        "What is {topic}?", "Explain {topic} to a ten-year-old.", "Give me three interesting facts about {topic}.",
        "Why is {topic} important?", "How does {topic} work, in simple terms?", "What are common misconceptions about {topic}?",
        "Write a short paragraph about the history of {topic}.", "What would a beginner need to know about {topic}?",
    ],
    "summarization": [
        "Summarize what scientists know about {topic} in three sentences.",
        "Give a one-paragraph overview of {topic}.", "Describe {topic} in exactly two sentences.",
    ],
    "howto": [
        "How do I {skill}?", "Give me step-by-step instructions to {skill}.", "What are the most common mistakes when people {skill}?",
        "I have ten minutes. What is the quickest way to {skill}?",
    ],
    "conversation": [
        "{situation} What should I do?", "{situation} Any tips?", "Hey! {situation} Can you help me think it through?",
        "{situation} Please answer in a friendly tone.",
    ],
    "translation": [
        "Translate into {lang}: {sentence}", "How would you say this in {lang}? \"{sentence}\"",
        "Translate the following sentence to {lang} and explain one word choice: {sentence}",
    ],
    "code": [
        "Write a {lang} function that {task}.", "Show me how to write a {lang} function that {task}, with a short example.",
        "Write a {lang} function that {task}, and explain how it works.",
    ],
    "math": [
        "What is {a} plus {b}? Explain briefly.", "Compute {a} multiplied by {b} step by step.",
        "If a box holds {b} apples, how many boxes do {a} times {b} apples fill?", "What is {a} minus {b}, and is the result even?",
        "A shop sells pens at {b} cents each. How much do {a} pens cost?",
    ],
    "writing": [
        "Write a four-line poem about {topic}.", "Write a short story for children that involves {topic}.",
        "Write a tweet that makes {topic} sound exciting.", "Write a haiku about {topic}.",
    ],
}


def training_prompts() -> list[Prompt]:
    """Every templated prompt, in a fixed order (id = category-number)."""
    fill = {
        "qa": [{"topic": t} for t in TOPICS], "summarization": [{"topic": t} for t in TOPICS],
        "writing": [{"topic": t} for t in TOPICS], "howto": [{"skill": s} for s in SKILLS],
        "conversation": [{"situation": s} for s in SITUATIONS],
        "translation": [{"lang": lang, "sentence": s} for lang in LANGUAGES for s in SENTENCES],
        "code": [{"lang": LANGS_CODE[i % len(LANGS_CODE)], "task": t} for i, t in enumerate(CODE_TASKS)],
        "math": [{"a": a, "b": b} for a, b in NUMBERS],
    }
    prompts = []
    for category, templates in TEMPLATES.items():
        n = 0
        for values in fill[category]:
            for template in templates:
                n += 1
                prompts.append(Prompt(f"{category}-{n}", template.format(**values), category))
    return prompts
