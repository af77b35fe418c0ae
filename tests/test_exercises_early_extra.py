"""The exercises added to chapters 2, 4 and 5 are wired into the grader's registry.

Their checkers live in companion.exercises.early_extra while the chapters' other exercises keep
their own module: the registry names the module per exercise where it differs from the chapter's.
(The wrong solutions each checker must refuse are in tests/test_checker_mutations_early_extra.py.)
"""
from companion.exercises import early_extra
from companion.grading import registry


def test_registry_names_the_module_of_each_added_exercise():
    chapters = registry.load()
    for number, checker in (("5.5", early_extra.three_back), ("5.6", early_extra.rotary_qk)):
        chapter = chapters[int(number.split(".")[0])]
        exercise = next(e for e in chapter.exercises if e.number == number)
        assert exercise.module == "companion.exercises.early_extra"
        assert chapter.checker(exercise) is checker
        assert checker.exercise == f"Exercise {number}"
    first = chapters[5].exercises[0]
    assert first.module == "" and chapter.checker(first).__module__ == "companion.exercises.positional"


def test_registry_file_is_up_to_date():
    assert registry.render(registry.build()) == registry.REGISTRY.read_text(encoding="utf-8")
