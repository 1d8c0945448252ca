/* The generator area: explicit generators passed to random ops
 * (TTPU_VALUE_KIND_GENERATOR), device defaults shared with the runtime's
 * seed calls, state round trips, clones, NULL and wrong-type handles, double
 * destroy and use after destroy, in strict and fused mode. */
#include "check.h"

#define N 16

static ttpu_value_t gen_arg(const ttpu_generator_t *g) {
    ttpu_value_t v = {TTPU_VALUE_KIND_GENERATOR, 0, 0.0, g, 0};
    return v;
}

/* torch.rand(N, generator=g) (g NULL: no generator) copied to `out`. */
static void rand_into(ttpu_runtime_t *rt, const ttpu_generator_t *g, float *out) {
    const int64_t size[1] = {N};
    ttpu_value_t args[2] = {{TTPU_VALUE_KIND_INT_LIST, 0, 0.0, size, 1}, {TTPU_VALUE_KIND_NONE, 0, 0.0, NULL, 0}};
    if (g != NULL) args[1] = gen_arg(g);
    ttpu_value_t res[1];
    size_t n = 0;
    CHECK_OK(ttpu_op_call(rt, "aten::rand.generator", args, 2, res, 1, &n));
    CHECK(n == 1 && res[0].kind == TTPU_VALUE_KIND_TENSOR);
    CHECK_OK(ttpu_tensor_to_host(rt, (const ttpu_tensor_t *)res[0].ptr, out, N * sizeof(float)));
    ttpu_tensor_destroy((ttpu_tensor_t *)res[0].ptr);
    for (int i = 0; i < N; i++) CHECK(out[i] >= 0.0f && out[i] < 1.0f);
}

static int same(const float *a, const float *b) { return memcmp(a, b, N * sizeof(float)) == 0; }

static void state_is(const ttpu_generator_t *g, uint64_t seed, uint64_t calls) {
    uint64_t s = 0, c = 0;
    CHECK_OK(ttpu_generator_state(g, &s, &c));
    CHECK(s == seed && c == calls);
}

static void run(ttpu_runtime_t *rt) {
    float a[N], b[N], c[N], d[N];
    ttpu_generator_t *g = NULL, *h = NULL, *def = NULL, *def2 = NULL, *clone = NULL;
    CHECK_OK(ttpu_generator_create(rt, 0, 11, &g));
    CHECK_OK(ttpu_generator_create(rt, 0, 12, &h));
    CHECK_OK(ttpu_runtime_default_generator(rt, 0, &def));
    CHECK_OK(ttpu_runtime_default_generator(rt, 0, &def2));
    CHECK(def != def2 && ttpu_generator_device(def) == 0 && ttpu_generator_device(g) == 0);

    /* An explicit generator seeded like the default draws what the default
     * draws, and neither advances the other. */
    CHECK_OK(ttpu_runtime_manual_seed(rt, 11));
    rand_into(rt, g, a);
    state_is(g, 11, 1);
    state_is(def, 11, 0);
    rand_into(rt, NULL, b);
    CHECK(same(a, b));
    state_is(g, 11, 1);
    state_is(def2, 11, 1); /* both handles name the one default */
    rand_into(rt, h, c);
    CHECK(!same(a, c));

    /* State round trip through the default's handle and the runtime. */
    uint64_t seed = 0, calls = 0;
    CHECK_OK(ttpu_runtime_rng_state(rt, 0, &seed, &calls));
    CHECK(seed == 11 && calls == 1);
    rand_into(rt, def, c);
    CHECK_OK(ttpu_generator_set_state(def2, seed, calls));
    rand_into(rt, NULL, d);
    CHECK(same(c, d));

    /* A clone starts from the state and then goes its own way. */
    CHECK_OK(ttpu_generator_manual_seed(g, 11));
    CHECK_OK(ttpu_generator_clone_state(g, &clone));
    CHECK(ttpu_generator_device(clone) == 0);
    rand_into(rt, clone, c);
    CHECK(same(a, c));
    state_is(g, 11, 0);
    rand_into(rt, g, d);
    CHECK(same(a, d));

    /* The generator handle is borrowed for the call only. */
    ttpu_generator_destroy(clone);
    ttpu_generator_destroy(h);
    ttpu_generator_destroy(g);
    ttpu_generator_destroy(def2);
    /* Use after destroy of a handle to the runtime's default: the handle is
     * dead, the default generator is not. */
    ttpu_generator_destroy(def);
    CHECK_CODE_MSG(ttpu_generator_manual_seed(def, 1), TTPU_CODE_INVALID_ARGUMENT,
                   "ttpu_generator_t was already destroyed (use after ttpu_generator_destroy)");
    CHECK_CODE(ttpu_generator_state(def, &seed, &calls), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(ttpu_generator_device(def) == -1);
    const int64_t size[1] = {N};
    ttpu_value_t args[2] = {{TTPU_VALUE_KIND_INT_LIST, 0, 0.0, size, 1}, gen_arg(def)};
    ttpu_value_t res[1];
    size_t n = 7;
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::rand.generator", args, 2, res, 1, &n), TTPU_CODE_INVALID_ARGUMENT,
                   "ttpu_generator_t was already destroyed");
    CHECK(n == 7);
    ttpu_generator_destroy(def); /* a second destroy is a no-op */
    CHECK_OK(ttpu_runtime_rng_state(rt, 0, &seed, &calls));
    CHECK(seed == 11 && calls == 2);
}

int main(void) {
    ttpu_runtime_t *rt = test_runtime();
    /* The same body in strict and fused mode. */
    CHECK_OK(ttpu_thread_set_mode(TTPU_MODE_DEFER_NEVER));
    run(rt);
    CHECK_OK(ttpu_thread_set_mode(TTPU_MODE_DEFER_AND_FUSE));
    run(rt);
    CHECK_OK(ttpu_thread_set_mode(-1));

    /* Bad arguments: NULL runtime, bad device, NULL outputs, NULL and
     * wrong-type handles. Outputs are untouched on failure. */
    ttpu_generator_t *g = NULL;
    CHECK_CODE(ttpu_generator_create(NULL, 0, 1, &g), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_generator_create(rt, 99, 1, &g), TTPU_CODE_OUT_OF_RANGE);
    CHECK_CODE(ttpu_generator_create(rt, -1, 1, &g), TTPU_CODE_OUT_OF_RANGE);
    CHECK_CODE(ttpu_runtime_default_generator(rt, 99, &g), TTPU_CODE_OUT_OF_RANGE);
    CHECK_CODE(ttpu_generator_create(rt, 0, 1, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_runtime_default_generator(rt, 0, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(g == NULL);
    CHECK_CODE_MSG(ttpu_generator_manual_seed(NULL, 1), TTPU_CODE_INVALID_ARGUMENT, "ttpu_generator_t is NULL");
    CHECK_CODE(ttpu_generator_set_state(NULL, 1, 2), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_generator_clone_state(NULL, &g), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(ttpu_generator_device(NULL) == -1);
    CHECK_CODE_MSG(ttpu_generator_manual_seed((const ttpu_generator_t *)rt, 1), TTPU_CODE_INVALID_ARGUMENT,
                   "not a live ttpu_generator_t");
    CHECK_OK(ttpu_generator_create(rt, 1, 3, &g));
    CHECK(ttpu_generator_device(g) == 1);
    uint64_t seed = 9, calls = 9;
    CHECK_CODE(ttpu_generator_state(g, NULL, &calls), TTPU_CODE_INVALID_ARGUMENT);
    CHECK_CODE(ttpu_generator_state(g, &seed, NULL), TTPU_CODE_INVALID_ARGUMENT);
    CHECK(seed == 9 && calls == 9);
    ttpu_generator_t *c = NULL;
    CHECK_CODE(ttpu_generator_clone_state(g, NULL), TTPU_CODE_INVALID_ARGUMENT);

    /* A generator value that is NULL, or a tensor, is rejected; a generator
     * where the schema wants something else names the argument. */
    const float one[1] = {1};
    const int64_t s1[1] = {1};
    ttpu_tensor_t *t = test_f32(rt, one, s1, 1);
    const int64_t size[1] = {2};
    ttpu_value_t args[2] = {{TTPU_VALUE_KIND_INT_LIST, 0, 0.0, size, 1}, gen_arg(NULL)};
    ttpu_value_t res[1];
    size_t n = 0;
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::rand.generator", args, 2, res, 1, &n), TTPU_CODE_INVALID_ARGUMENT,
                   "ttpu_generator_t is NULL");
    args[1] = gen_arg((const ttpu_generator_t *)t);
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::rand.generator", args, 2, res, 1, &n), TTPU_CODE_INVALID_ARGUMENT,
                   "not a live ttpu_generator_t");
    args[1] = gen_arg(g);
    CHECK_CODE_MSG(ttpu_op_call(rt, "aten::rand", args, 2, res, 1, &n), TTPU_CODE_INVALID_ARGUMENT,
                   "must be ScalarType or None, not Generator");
    /* A generator of device 1 may drive an op on device 0 (PyTorch checks
     * only the device type). */
    CHECK_OK(ttpu_op_call(rt, "aten::rand.generator", args, 2, res, 1, &n));
    CHECK(n == 1);
    ttpu_tensor_destroy((ttpu_tensor_t *)res[0].ptr);
    CHECK_OK(ttpu_generator_state(g, &seed, &calls));
    CHECK(seed == 3 && calls == 1);

    /* A handle outlives the runtime (the generator does not borrow it). */
    ttpu_tensor_destroy(t);
    CHECK_OK(ttpu_generator_clone_state(g, &c));
    ttpu_runtime_destroy(rt);
    CHECK_OK(ttpu_generator_set_state(c, 4, 5));
    CHECK_OK(ttpu_generator_state(c, &seed, &calls));
    CHECK(seed == 4 && calls == 5);
    ttpu_generator_destroy(c);
    ttpu_generator_destroy(g);
    ttpu_generator_destroy(g);
    ttpu_generator_destroy(NULL);

    printf("test_generator: ok\n");
    return 0;
}
