"""Undo from Python: a step with an undo is compensated exactly once when the
run fails or is cancelled later, with the act's receipt."""

import actum

IDEM = dict(window_ms=86_400_000)


def trip_runtime(engine, undone, hotel_fails=True, undo=None):
    runtime = actum.Runtime(engine)
    book = actum.Tool.idempotent("airline.book", **IDEM)
    cancel = actum.Tool.idempotent("airline.cancel", **IDEM)
    hotel = actum.Tool.idempotent("hotel.book", **IDEM)

    def record_undo(call):
        undone.append((call.key, call.args, call.receipt, call.query))
        return b"cancelled " + call.receipt

    runtime.register_undo(cancel, undo or record_undo)

    @runtime.agent("trip")
    def trip(ctx):
        pnr = ctx.step_with_undo(
            "flight", book, b"TP 123", lambda call: b"PNR-9", undo=(cancel, b"cancel TP 123")
        )
        if hotel_fails:

            def sold_out(call):
                raise actum.ToolFailed("sold out")

            ctx.step("hotel", hotel, b"3 nights", sold_out)
        else:
            ctx.signal("go")
        return pnr

    return runtime


def test_a_run_that_fails_after_a_step_with_an_undo_is_compensated_once(tmp_path):
    undone = []
    with actum.Engine.open(tmp_path) as engine:
        runtime = trip_runtime(engine, undone)
        runtime.start("trip", "trip-1", b"")
        assert [(w.outcome, w.detail) for w in runtime.drain()] == [("ended", "failed")]
        assert undone == [("trip-1/flight/undo/1", b"cancel TP 123", b"PNR-9", False)]
        # Nothing is left to drive, and the undo is never sent again.
        assert runtime.drain() == []
        assert len(undone) == 1
        assert engine.state("trip-1") == "failed"
        audit = " ".join(what + " " + why for what, why in engine.audit("trip-1"))
        assert "sold out" in audit and "compensat" in audit
    # Nor after a restart.
    with actum.Engine.open(tmp_path) as engine:
        runtime = trip_runtime(engine, undone)
        assert runtime.drain() == []
        assert len(undone) == 1


def test_a_cancelled_run_is_compensated(tmp_path):
    undone = []
    with actum.Engine.open(tmp_path) as engine:
        runtime = trip_runtime(engine, undone, hotel_fails=False)
        runtime.start("trip", "trip-2", b"")
        assert [w.outcome for w in runtime.drain()] == ["parked"]
        engine.operate("trip-2", "cancel", "ops", "customer called")
        runtime.drain()
        assert undone == [("trip-2/flight/undo/1", b"cancel TP 123", b"PNR-9", False)]
        assert engine.state("trip-2") == "cancelled"


def test_an_undo_that_raises_leaves_the_saga_for_an_operator(tmp_path):
    tries = []

    def broken(call):
        tries.append(call.key)
        raise RuntimeError("airline API down")

    with actum.Engine.open(tmp_path) as engine:
        runtime = trip_runtime(engine, [], undo=broken)
        runtime.start("trip", "trip-3", b"")
        [worked] = runtime.drain()
        assert worked.outcome == "compensating"
        assert engine.state("trip-3") == "compensating"
        assert tries == ["trip-3/flight/undo/1"]
        assert ("trip-3/flight/undo/1 failed (terminal)", "") in engine.audit("trip-3")
        # The operator gives up the saga: the run ends where it was headed.
        assert engine.operate("trip-3", "abandon", "ops", "refunded by hand") == "failed"
