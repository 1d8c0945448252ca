/* The stream area: streams and events (create, record, wait, synchronize,
 * query, elapsed time, current stream, destroy), NULL and destroyed handles. */
#include "check.h"

int main(void) {
    ttpu_runtime_t *rt = test_runtime();

    ttpu_stream_t *def = NULL, *def2 = NULL, *s = NULL, *cur = NULL;
    CHECK_OK(ttpu_stream_default(rt, 0, &def));
    CHECK_OK(ttpu_stream_default(rt, 0, &def2));
    CHECK(def != def2 && ttpu_stream_same(def, def2));
    CHECK(ttpu_stream_id(def) == 0 && ttpu_stream_device(def) == 0);
    CHECK_OK(ttpu_stream_create(rt, 0, &s));
    CHECK(ttpu_stream_id(s) > 0 && !ttpu_stream_same(s, def));
    CHECK_CODE(ttpu_stream_create(rt, 99, &cur), TTPU_CODE_OUT_OF_RANGE);
    CHECK_CODE(ttpu_stream_create(rt, 0, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_stream_create(NULL, 0, &cur), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(cur == NULL);

    /* Current stream: set, read back, reset. */
    CHECK_OK(ttpu_stream_set_current(rt, s));
    CHECK_OK(ttpu_stream_current(rt, 0, &cur));
    CHECK(ttpu_stream_same(cur, s));
    ttpu_stream_destroy(cur);

    /* Events around work on the stream. */
    ttpu_event_t *e0 = NULL, *e1 = NULL;
    CHECK_OK(ttpu_event_create(&e0));
    CHECK_OK(ttpu_event_create(&e1));
    CHECK_CODE(ttpu_event_create(NULL), TTPU_CODE_INVALID_ARGUMENT);
    bool done = false;
    CHECK_OK(ttpu_event_query(e0, &done));
    CHECK(done); /* never recorded */
    CHECK_OK(ttpu_event_synchronize(e0));
    double ms = -1;
    CHECK_CODE(ttpu_event_elapsed_ms(e0, e1, &ms), TTPU_CODE_INVALID_ARGUMENT);

    CHECK_OK(ttpu_event_record(e0, s));
    const float a[4] = {1, 2, 3, 4};
    const int64_t s4[1] = {4};
    ttpu_tensor_t *ta = test_f32(rt, a, s4, 1);
    ttpu_value_t args[2] = {test_tensor_arg(ta), test_tensor_arg(ta)};
    ttpu_value_t out[1];
    size_t n = 0;
    CHECK_OK(ttpu_op_call(rt, "aten::mul.Tensor", args, 2, out, 1, &n));
    ttpu_tensor_t *sq = (ttpu_tensor_t *)out[0].ptr;
    CHECK_OK(ttpu_event_record(e1, s));
    CHECK_OK(ttpu_stream_wait_event(def, e1));
    CHECK_OK(ttpu_event_synchronize(e1));
    CHECK_OK(ttpu_event_query(e1, &done));
    CHECK(done);
    CHECK_OK(ttpu_event_elapsed_ms(e0, e1, &ms));
    CHECK(ms >= 0);
    CHECK_CODE(ttpu_event_elapsed_ms(e0, e1, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_OK(ttpu_stream_synchronize(s));
    bool idle = false;
    CHECK_OK(ttpu_stream_query(s, &idle));
    CHECK(idle);
    const float want[4] = {1, 4, 9, 16};
    CHECK_F32(rt, sq, want, 4);
    CHECK_OK(ttpu_stream_set_current(rt, NULL));
    CHECK_OK(ttpu_stream_current(rt, 0, &cur));
    CHECK(ttpu_stream_same(cur, def));
    ttpu_stream_destroy(cur);

    /* NULL handles. */
    CHECK_CODE_MSG(ttpu_stream_synchronize(NULL), TTPU_CODE_INVALID_ARGUMENT, "ttpu_stream_t is NULL");
    CHECK_CODE(ttpu_stream_query(NULL, &idle), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_stream_query(s, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_stream_wait_event(NULL, e0), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_stream_wait_event(s, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE_MSG(ttpu_event_record(NULL, s), TTPU_CODE_INVALID_ARGUMENT, "ttpu_event_t is NULL");
    CHECK_CODE(ttpu_event_record(e0, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_event_synchronize(NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_event_query(NULL, &done), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_stream_set_current(NULL, s), TTPU_CODE_INVALID_ARGUMENT);
    {
        /* Another runtime's stream cannot become this runtime's current one. */
        ttpu_runtime_t *other = test_runtime();
        ttpu_stream_t *theirs = NULL;
        CHECK_OK(ttpu_stream_create(other, 0, &theirs));
        CHECK_CODE_MSG(ttpu_stream_set_current(rt, theirs), TTPU_CODE_INVALID_ARGUMENT, "belongs to another runtime");
        CHECK_OK(ttpu_stream_set_current(other, theirs));
        CHECK_OK(ttpu_stream_set_current(other, NULL));
        /* An event knows the runtime of the stream it was recorded on: a
         * stream of another runtime cannot wait on it, and two events of
         * different runtimes are not timed against each other. */
        ttpu_event_t *mine = NULL, *their_ev = NULL;
        CHECK_OK(ttpu_event_create(&mine));
        CHECK_OK(ttpu_event_create(&their_ev));
        CHECK_OK(ttpu_event_record(mine, s));
        CHECK_OK(ttpu_event_record(their_ev, theirs));
        CHECK_OK(ttpu_event_synchronize(mine));
        CHECK_OK(ttpu_event_synchronize(their_ev));
        CHECK_CODE_MSG(ttpu_stream_wait_event(theirs, mine), TTPU_CODE_INVALID_ARGUMENT, "recorded on a stream of runtime #");
        CHECK_CODE_MSG(ttpu_stream_wait_event(s, their_ev), TTPU_CODE_INVALID_ARGUMENT, "belongs to runtime #");
        double ms = 0;
        CHECK_CODE_MSG(ttpu_event_elapsed_ms(mine, their_ev, &ms), TTPU_CODE_INVALID_ARGUMENT, "the end event on one of runtime #");
        /* Re-recorded on the right runtime, the same event is fine. */
        CHECK_OK(ttpu_event_record(their_ev, s));
        CHECK_OK(ttpu_event_synchronize(their_ev));
        CHECK_OK(ttpu_stream_wait_event(s, their_ev));
        CHECK_OK(ttpu_event_elapsed_ms(mine, their_ev, &ms));
        CHECK(ms >= 0.0);
        ttpu_event_destroy(mine);
        ttpu_event_destroy(their_ev);
        ttpu_stream_destroy(theirs);
        ttpu_runtime_destroy(other);
    }
    CHECK(ttpu_stream_id(NULL) == -1 && ttpu_stream_device(NULL) == -1);
    CHECK(!ttpu_stream_same(NULL, s));
    /* An event passed as a stream is rejected by its magic. */
    CHECK_CODE_MSG(ttpu_stream_synchronize((const ttpu_stream_t *)e0), TTPU_CODE_INVALID_ARGUMENT,
                   "not a live ttpu_stream_t");
    ttpu_stream_destroy(NULL);
    ttpu_event_destroy(NULL);

    /* Destroyed handles: deterministic errors, double destroy is a no-op. */
    ttpu_event_destroy(e0);
    CHECK_CODE_MSG(ttpu_event_synchronize(e0), TTPU_CODE_INVALID_ARGUMENT,
                   "ttpu_event_t was already destroyed (use after ttpu_event_destroy)");
    CHECK_CODE(ttpu_event_record(e0, s), TTPU_CODE_INVALID_ARGUMENT);
    ttpu_event_destroy(e0);
    ttpu_stream_destroy(s);
    CHECK_CODE_MSG(ttpu_stream_synchronize(s), TTPU_CODE_INVALID_ARGUMENT,
                   "ttpu_stream_t was already destroyed (use after ttpu_stream_destroy)");
    CHECK_CODE(ttpu_event_record(e1, s), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(ttpu_stream_id(s) == -1);
    ttpu_stream_destroy(s);
    /* The other default-stream handle is unaffected by destroying one. */
    ttpu_stream_destroy(def2);
    CHECK_OK(ttpu_stream_synchronize(def));

    ttpu_event_destroy(e1);
    ttpu_stream_destroy(def);
    ttpu_tensor_destroy(sq);
    ttpu_tensor_destroy(ta);
    ttpu_runtime_destroy(rt);
    printf("test_stream: ok\n");
    return 0;
}
