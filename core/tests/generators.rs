//! Random generators: the device defaults and explicit `generator=`
//! arguments, in every execution mode. The facts checked are independent of
//! the implementation: equal seeds give equal draws, draws from one
//! generator leave the others alone, a restored state replays, samples lie
//! in their range with the expected moments, and which generator a call
//! uses never changes the program.

mod common;
use common::*;

use std::sync::Arc;

use torchtpu_core::graph::FlushReason;
use torchtpu_core::runtime::set_thread_mode;
use torchtpu_core::{Code, ExecMode, Generator, Runtime, Tensor, Value};


fn gen_arg(g: Option<&Generator>) -> Value {
    g.map_or(Value::None, Value::from)
}

/// `torch.rand(n, generator=g)`.
fn rand(rt: &Arc<Runtime>, n: i64, g: Option<&Generator>) -> Vec<f32> {
    host_f32(rt, &rt.call1("aten::rand.generator", &[Value::IntList(vec![n]), gen_arg(g)]).unwrap())
}

/// `torch.randn(n, generator=g)`, through `normal_` on a fresh tensor as
/// PyTorch's composite `randn.generator` does it.
fn randn_(rt: &Arc<Runtime>, n: i64, g: Option<&Generator>) -> Vec<f32> {
    let t = rt.call1("aten::zeros", &[Value::IntList(vec![n])]).unwrap();
    rt.call1("aten::normal_", &[t.clone().into(), 0.0.into(), 1.0.into(), gen_arg(g)]).unwrap();
    host_f32(rt, &t)
}

#[test]
fn same_seed_same_draws_in_every_mode() {
    let mut per_mode = Vec::new();
    each_mode(|rt, _| {
        let g = rt.new_generator(0, 1234).unwrap();
        let a = rand(rt, 64, Some(&g));
        let b = randn_(rt, 64, Some(&g));
        rt.manual_seed(1234);
        let c = rand(rt, 64, None);
        let d = randn_(rt, 64, None);
        // The default generator seeded alike draws the same sequence.
        assert_eq!((&a, &b), (&c, &d));
        assert_ne!(a, rand(rt, 64, Some(&g)));
        per_mode.push((a, b));
    });
    // And the numbers do not depend on the mode.
    assert!(per_mode.windows(2).all(|w| w[0] == w[1]));
}

#[test]
fn explicit_generator_and_device_default_are_independent() {
    each_mode(|rt, mode| {
        rt.manual_seed(5);
        let g = rt.new_generator(0, 5).unwrap();
        let first_default = rand(rt, 16, None);
        rt.manual_seed(5);
        // Draws from g leave the default where it was...
        let from_g = rand(rt, 16, Some(&g));
        assert_eq!(from_g, first_default, "{mode:?}");
        rand(rt, 16, Some(&g));
        assert_eq!(rt.rng_state(0).unwrap(), (5, 0), "{mode:?}");
        assert_eq!(rand(rt, 16, None), first_default, "{mode:?}");
        // ...and draws from the default leave g where it was.
        assert_eq!(g.state(), (5, 2), "{mode:?}");
        rand(rt, 16, None);
        assert_eq!(g.state(), (5, 2), "{mode:?}");
        // Another device's default is untouched by either.
        if rt.device_count() > 1 {
            assert_eq!(rt.rng_state(1).unwrap(), (5, 0));
        }
    });
}

#[test]
fn state_round_trip_replays_draws() {
    each_mode(|rt, mode| {
        let g = rt.new_generator(0, 77).unwrap();
        rand(rt, 8, Some(&g));
        let (seed, calls) = g.state();
        assert_eq!((seed, calls, g.initial_seed()), (77, 1, 77));
        let a = rand(rt, 32, Some(&g));
        let b = randn_(rt, 32, Some(&g));
        g.set_state(seed, calls);
        assert_eq!(rand(rt, 32, Some(&g)), a, "{mode:?}");
        assert_eq!(randn_(rt, 32, Some(&g)), b, "{mode:?}");
        // A clone carries the state but then goes its own way.
        g.set_state(seed, calls);
        let c = g.clone_state();
        assert_eq!(rand(rt, 32, Some(&c)), a, "{mode:?}");
        assert_eq!(g.state(), (77, 1));
        assert_eq!(rand(rt, 32, Some(&g)), a, "{mode:?}");
        // The default generator's state works the same through the runtime.
        let d = rt.default_generator(0).unwrap();
        let (s0, c0) = rt.rng_state(0).unwrap();
        let x = rand(rt, 32, None);
        assert_eq!(d.state(), (s0, c0 + 1));
        rt.set_rng_state(0, s0, c0).unwrap();
        assert_eq!(rand(rt, 32, Some(&d)), x, "{mode:?}");
        d.set_state(s0, c0);
        assert_eq!(rand(rt, 32, None), x, "{mode:?}");
    });
}

#[test]
fn different_seeds_differ_and_samples_are_in_range() {
    each_mode(|rt, mode| {
        let (g1, g2) = (rt.new_generator(0, 1).unwrap(), rt.new_generator(0, 2).unwrap());
        let (a, b) = (rand(rt, 4096, Some(&g1)), rand(rt, 4096, Some(&g2)));
        assert_ne!(a, b, "{mode:?}");
        // Two independent uniform streams agree in few places.
        assert!(a.iter().zip(&b).filter(|(x, y)| x == y).count() < 8, "{mode:?}");
        for u in [&a, &b] {
            assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)), "{mode:?}");
            // Mean 1/2 and variance 1/12; 4096 samples put 5 sigma at 0.023 and 0.007.
            let mean = u.iter().map(|&x| x as f64).sum::<f64>() / u.len() as f64;
            let var = u.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / u.len() as f64;
            assert!((mean - 0.5).abs() < 0.023 && (var - 1.0 / 12.0).abs() < 0.007, "{mode:?}: {mean} {var}");
        }
        let n = randn_(rt, 4096, Some(&g1));
        let mean = n.iter().map(|&x| x as f64).sum::<f64>() / n.len() as f64;
        let var = n.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / n.len() as f64;
        assert!(mean.abs() < 0.08 && (var - 1.0).abs() < 0.12, "{mode:?}: {mean} {var}");
    });
}

#[test]
fn generator_overloads_of_factory_ops() {
    each_mode(|rt, mode| {
        let g = rt.new_generator(0, 9).unwrap();
        let gv = Value::from(&g);
        let ints = |name: &str, args: &[Value]| host_i64(rt, &rt.call1(name, args).unwrap());
        let r = ints("aten::randint.low_generator", &[3.into(), 7.into(), Value::IntList(vec![256]), gv.clone()]);
        assert!(r.iter().all(|x| (3..7).contains(x)), "{mode:?}");
        assert!((3..7).all(|k| r.contains(&k)), "{mode:?}");
        let r = ints("aten::randint.generator", &[5.into(), Value::IntList(vec![64]), gv.clone()]);
        assert!(r.iter().all(|x| (0..5).contains(x)), "{mode:?}");
        let mut p = ints("aten::randperm.generator", &[10.into(), gv.clone()]);
        p.sort();
        assert_eq!(p, (0..10).collect::<Vec<_>>());
        // dtype comes after the generator in these overloads.
        let t = rt.call1("aten::randn.generator", &[Value::IntList(vec![3]), gv.clone(), torchtpu_core::DType::F64.into()]).unwrap();
        assert_eq!(t.dtype(), torchtpu_core::DType::F64);
        let like = rt.call1("aten::rand_like.generator", &[t.clone().into(), gv.clone()]).unwrap();
        assert_eq!((like.dtype(), like.sizes()), (torchtpu_core::DType::F64, &[3i64][..]));
        assert_eq!(g.state(), (9, 5), "{mode:?}: one draw per call");
        // Omitted, the generator is None: the device default draws.
        let before = rt.rng_state(0).unwrap();
        rt.call1("aten::randn_like.generator", &[t.into()]).unwrap();
        assert_eq!(rt.rng_state(0).unwrap(), (before.0, before.1 + 1));
    });
}

#[test]
fn which_generator_never_changes_the_program() {
    let rt = rt();
    let g = rt.new_generator(0, 3).unwrap();
    let h = rt.new_generator(0, 4).unwrap();
    // Strict: one compile for the op whether or not a generator is given.
    rand(&rt, 16, None);
    let compiles = rt.stats().compiles;
    rand(&rt, 16, Some(&g));
    rand(&rt, 16, Some(&h));
    g.manual_seed(99);
    rand(&rt, 16, Some(&g));
    assert_eq!(rt.stats().compiles, compiles);
    // Fused: the same graph with another generator is a cache hit.
    set_thread_mode(Some(ExecMode::DeferAndFuse)).unwrap();
    let fused = |g: &Generator| {
        let t = rt.call1("aten::rand.generator", &[Value::IntList(vec![16]), g.into()]).unwrap();
        let u = rt.call1("aten::mul.Tensor", &[t.clone().into(), t.into()]).unwrap();
        rt.flush(FlushReason::Explicit).unwrap();
        (host_f32(&rt, &u), rt.last_flush().unwrap().tier)
    };
    let (a, _) = fused(&g);
    let compiles = rt.stats().compiles;
    let (b, tier) = fused(&h);
    assert_eq!((rt.stats().compiles, tier), (compiles, Some("memory")));
    assert_ne!(a, b);
    // Recording draws at once: the generator has advanced before the flush.
    let before = g.state();
    let _t = rt.call1("aten::rand.generator", &[Value::IntList(vec![4]), (&g).into()]).unwrap();
    assert_eq!(g.state(), (before.0, before.1 + 1));
    set_thread_mode(None).unwrap();
}

#[test]
fn generator_arguments_are_checked() {
    let rt = rt();
    let e = rt.new_generator(rt.device_count(), 0).unwrap_err();
    assert_eq!(e.code(), Code::OutOfRange, "{e}");
    assert!(rt.default_generator(rt.device_count()).is_err());
    assert!(rt.default_generator(0).unwrap().same_as(&rt.default_generator(0).unwrap()));
    // A generator where the schema wants another type, and vice versa.
    let g = rt.new_generator(0, 0).unwrap();
    let e = rt.call("aten::rand", &[Value::IntList(vec![2]), (&g).into()]).unwrap_err();
    assert_eq!(e.code(), Code::InvalidArgument);
    assert!(e.to_string().contains("must be ScalarType or None, not Generator"), "{e}");
    let e = rt.call("aten::rand.generator", &[Value::IntList(vec![2]), 3.into()]).unwrap_err();
    assert!(e.to_string().contains("'generator' (position 1) must be Generator"), "{e}");
    // A generator of another device may drive an op (PyTorch checks only the
    // device type): its state advances, the result is on the op's device.
    if rt.device_count() > 1 {
        let g1 = rt.new_generator(1, 8).unwrap();
        let x = rt.call1("aten::rand.generator", &[Value::IntList(vec![2]), (&g1).into()]).unwrap();
        assert_eq!((x.device(), g1.state()), (0, (8, 1)));
    }
}

/// The samplers of `ops::random` (each op with its generator as the last
/// argument): one draw per call from the given generator, the device default
/// untouched, the same values for the same seed and in every mode.
#[test]
fn samplers_draw_once_from_their_generator() {
    type Draw = fn(&Arc<Runtime>, Value) -> Tensor;
    let ops: Vec<(&str, Draw)> = vec![
        ("normal.Tensor_float", |rt, g| {
            let m = rt.call1("aten::zeros", &[Value::IntList(vec![32])]).unwrap();
            rt.call1("aten::normal.Tensor_float", &[m.into(), 2.0.into(), g]).unwrap()
        }),
        ("normal.float_float", |rt, g| {
            rt.call1("aten::normal.float_float", &[1.0.into(), 2.0.into(), Value::IntList(vec![32]), g]).unwrap()
        }),
        ("random_.from", |rt, g| {
            let t = rt.call1("aten::zeros", &[Value::IntList(vec![32])]).unwrap();
            rt.call1("aten::random_.from", &[t.into(), (-4).into(), Value::Int(9), g]).unwrap()
        }),
        ("exponential_", |rt, g| {
            let t = rt.call1("aten::zeros", &[Value::IntList(vec![32])]).unwrap();
            rt.call1("aten::exponential_", &[t.into(), 1.5.into(), g]).unwrap()
        }),
        ("multinomial", |rt, g| {
            let w = f32s(rt, &[1.0, 0.0, 2.0, 5.0], &[4]);
            rt.call1("aten::multinomial", &[w.into(), 16.into(), true.into(), g]).unwrap()
        }),
        ("poisson", |rt, g| {
            let r = f32s(rt, &[0.5, 3.0, 12.0, 400.0], &[4]);
            rt.call1("aten::poisson", &[r.into(), g]).unwrap()
        }),
    ];
    let mut per_mode: Vec<Vec<Vec<u8>>> = Vec::new();
    each_mode(|rt, mode| {
        let mut firsts = Vec::new();
        for (name, draw) in &ops {
            let g = rt.new_generator(0, 42).unwrap();
            let before = rt.rng_state(0).unwrap();
            let a = rt.tensor_to_host(&draw(rt, (&g).into())).unwrap();
            let b = rt.tensor_to_host(&draw(rt, (&g).into())).unwrap();
            assert_eq!(g.state(), (42, 2), "{name} {mode:?}: one draw per call");
            assert_eq!(rt.rng_state(0).unwrap(), before, "{name} {mode:?}: the default is untouched");
            assert_ne!(a, b, "{name} {mode:?}");
            g.manual_seed(42);
            assert_eq!(rt.tensor_to_host(&draw(rt, (&g).into())).unwrap(), a, "{name} {mode:?}");
            firsts.push(a);
        }
        per_mode.push(firsts);
    });
    assert!(per_mode.windows(2).all(|w| w[0] == w[1]), "values depend on the mode");
}

/// A check of values (a negative probability) fails as an invalid argument
/// at the next read, naming the op; the runtime stays usable.
#[test]
fn value_checks_report_invalid_arguments() {
    each_mode(|rt, mode| {
        let w = f32s(rt, &[1.0, -1.0, 2.0], &[3]);
        let e = rt
            .call1("aten::multinomial", &[w.into(), 2.into(), true.into()])
            .and_then(|t| rt.tensor_to_host(&t))
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{mode:?}: {e}");
        assert!(e.to_string().contains("aten::multinomial: probability tensor contains either"), "{e}");
        let w = f32s(rt, &[1.0, 0.0, 2.0], &[3]);
        let x = rt.call1("aten::multinomial", &[w.into(), 64.into(), true.into()]).unwrap();
        assert!(host_i64(rt, &x).iter().all(|&k| k == 0 || k == 2), "{mode:?}");
    });
}
