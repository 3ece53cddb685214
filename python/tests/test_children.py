"""Fan-out from Python: ctx.children starts child runs in one commit, the
parent parks, and resumes with their outputs in the order of the calls."""

import actum


def test_children_run_and_the_parent_gets_their_outputs_in_order(tmp_path):
    calls = []
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("upper")
        def upper(ctx):
            return ctx.input.upper()

        @runtime.agent("twice")
        def twice(ctx):
            if ctx.input == b"boom":
                raise ValueError("no")
            return ctx.input * 2

        @runtime.agent("parent")
        def parent(ctx):
            calls.append(ctx.run_id)
            ended = ctx.children("fan", [("upper", b"ab"), ("twice", b"cd"), ("twice", b"boom")])
            return b"|".join(
                b"%d:%s:%s" % (c.index, c.state.encode(), c.output if c.completed else b"-")
                for c in ended
            )

        runtime.start("parent", "p", b"")
        worked = runtime.drain()
        assert worked[0].outcome == "parked" and worked[0].detail == "fan"
        assert worked[-1].outcome == "completed", worked
        assert runtime.output("p") == b"0:completed:AB|1:completed:cdcd|2:failed:-"
        # The parent ran twice (before the children and after them); each
        # child's own books are there to read.
        assert calls == ["p", "p"]
        children = ["p:fan.1", "p:fan.2", "p:fan.3"]
        assert [engine.state(c) for c in children] == ["completed", "completed", "failed"]
        assert runtime.output("p:fan.2") == b"cdcd"


def test_join_first_cancels_the_other_children(tmp_path):
    with actum.Engine.open(tmp_path) as engine:
        runtime = actum.Runtime(engine)

        @runtime.agent("quick")
        def quick(ctx):
            return b"quick " + ctx.input

        @runtime.agent("slow")
        def slow(ctx):
            ctx.signal("never")
            return b"slow"

        @runtime.agent("race")
        def race(ctx):
            [first] = ctx.children("race", [("slow", b"a"), ("quick", b"b")], join="first")
            return b"%d %s" % (first.index, first.output)

        runtime.start("race", "r", b"")
        assert runtime.drain()[-1].outcome == "completed"
        assert runtime.output("r") == b"1 quick b"
        assert engine.state("r:race.1") == "cancelled"
