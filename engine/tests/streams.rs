//! Streams and events as a learner uses them (`cuda::Stream`, `cuda::Event`, `with_stream`),
//! on emulated GPUs, where each stream is a queue of its own and the races of real streams
//! really happen: a missing `wait_stream` reads stale data, a block another stream still reads
//! is not handed out again after `record_stream`, events time the work between them, misuse is
//! an error that names the fix, and on the CPU every call is a no-op, as in PyTorch. A stream is
//! held (`Stream::hold`, as behind a long kernel) so that each race has one outcome.

#[path = "support/own_process.rs"]
mod own_process;

use own_process::in_own_process;
use placelab::cuda::{self, Event, Stream, with_stream};
use placelab::prelude::*;

const GPU: Device = Device::Cuda(0);
const N: usize = 4096;

fn emulated() {
    cuda::emulate(2, None).unwrap();
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn a_missing_wait_stream_reads_stale_data_and_wait_stream_makes_it_right() {
    emulated();
    // Streams of this test's own: the default stream is every test's.
    let (producer, consumer) = (Stream::new(&GPU).unwrap(), Stream::new(&GPU).unwrap());
    for wait in [false, true] {
        let (a, ones) = with_stream(&producer, || {
            (
                Tensor::zeros(N, GPU).unwrap(),
                Tensor::ones(N, GPU).unwrap(),
            )
        });
        producer.synchronize().unwrap(); // a holds zeros
        let held = producer.hold().unwrap();
        with_stream(&producer, || a.assign_(&ones)).unwrap(); // behind the hold
        let b = with_stream(&consumer, || {
            if wait {
                consumer.wait_stream(&producer)?;
            }
            a.mul(2.0)
        })
        .unwrap();
        if wait {
            drop(held);
            consumer.synchronize().unwrap();
        } else {
            // The consumer reads `a` while the producer is still held.
            consumer.synchronize().unwrap();
            drop(held);
        }
        let expected = if wait { 2.0 } else { 0.0 };
        assert!(
            values(&b).iter().all(|&v| v == expected),
            "wait_stream {wait}: b should be {expected} everywhere, got {:?}",
            &values(&b)[..4]
        );
        producer.synchronize().unwrap();
    }
}

#[test]
fn record_stream_keeps_a_block_from_reuse_until_the_other_stream_is_done() {
    emulated();
    // A pool of this test's own (its stream's), so that without the rule z takes x's block.
    let (own, side) = (Stream::new(&GPU).unwrap(), Stream::new(&GPU).unwrap());
    let x = with_stream(&own, || Tensor::full(N, 3.0, GPU).unwrap());
    own.synchronize().unwrap();
    let held = side.hold().unwrap();
    let y = with_stream(&side, || x.mul(2.0)).unwrap(); // reads x once the hold ends
    x.record_stream(&side).unwrap();
    drop(x);
    // Without the rule this tensor would take x's block and write 7s where the side stream
    // is about to read 3s.
    let z = with_stream(&own, || Tensor::full(N, 7.0, GPU).unwrap());
    own.synchronize().unwrap(); // z is written before the side stream goes on
    drop(held);
    side.synchronize().unwrap();
    assert!(
        values(&y).iter().all(|&v| v == 6.0),
        "the side stream read a reused block: y = {:?}",
        &values(&y)[..4]
    );
    assert!(values(&z).iter().all(|&v| v == 7.0));
}

#[test]
fn a_stream_made_current_takes_the_work_and_the_memory_of_its_scope() {
    emulated();
    let side = Stream::new(&GPU).unwrap();
    assert_eq!(
        cuda::current_stream(&GPU).unwrap(),
        cuda::default_stream(&GPU).unwrap()
    );
    let pinned = Tensor::full(N, 5.0, Device::Cpu)
        .unwrap()
        .pin_memory()
        .unwrap();
    let held = side.hold().unwrap();
    let on_gpu = with_stream(&side, || {
        assert_eq!(cuda::current_stream(&GPU).unwrap(), side);
        let elsewhere = std::thread::spawn(|| cuda::current_stream(&GPU).unwrap().id());
        assert_eq!(
            elsewhere.join().unwrap(),
            0,
            "the current stream is the thread's"
        );
        pinned.to_non_blocking(&GPU)
    })
    .unwrap();
    assert_eq!(
        cuda::current_stream(&GPU).unwrap().id(),
        0,
        "the scope's stream stays in it"
    );
    // The default stream is not behind the hold (other tests may queue on it: wait, then ask).
    cuda::default_stream(&GPU).unwrap().synchronize().unwrap();
    assert!(
        !side.query().unwrap(),
        "the copy went on the side stream, which is held"
    );
    drop(held);
    // (Not `side.query()` after this: a device-wide wait of another test records an event on
    // every stream, this one too.)
    side.synchronize().unwrap();
    assert!(values(&on_gpu).iter().all(|&v| v == 5.0));
}

#[test]
fn events_mark_points_in_a_stream_and_time_the_work_between_them() {
    emulated();
    let s = Stream::new(&GPU).unwrap();
    let (start, end) = (Event::new(), Event::new());
    assert!(
        end.query(),
        "an event never recorded counts as reached, as in CUDA"
    );
    start.record(&s).unwrap();
    let held = s.hold().unwrap();
    let t = with_stream(&s, || Tensor::ones(N, GPU).unwrap().mul(3.0).unwrap());
    end.record(&s).unwrap();
    start.synchronize().unwrap();
    let held_from = std::time::Instant::now();
    assert!(!end.query(), "the stream is held before the end event");
    let e = start.elapsed_time(&end).unwrap_err().to_string();
    assert!(e.contains("end.synchronize()"), "{e}");
    // Not a timed check: the stream cannot pass the hold, and the host keeps it 20 ms.
    while held_from.elapsed() < std::time::Duration::from_millis(20) {
        assert!(!end.query());
        std::thread::yield_now();
    }
    drop(held);
    end.synchronize().unwrap();
    assert!(end.query());
    // start was reached before held_from, end after the release: at least the 20 ms between.
    let ms = start.elapsed_time(&end).unwrap();
    assert!(ms >= 20.0, "{ms} ms between the events");
    s.synchronize().unwrap();
    assert!(values(&t).iter().all(|&v| v == 3.0));
    // An event recorded on one stream, waited for by another: the second stream's work after
    // the wait sees the first's.
    let side = Stream::new(&GPU).unwrap();
    let held = s.hold().unwrap();
    let u = with_stream(&s, || {
        let u = Tensor::zeros(N, GPU)?;
        u.assign_(&t)?;
        Ok::<_, Error>(u)
    })
    .unwrap();
    let ready = s.record_event().unwrap();
    let w = with_stream(&side, || {
        side.wait_event(&ready)?;
        u.add(1.0)
    })
    .unwrap();
    drop(held);
    side.synchronize().unwrap();
    assert!(values(&w).iter().all(|&v| v == 4.0));
    s.synchronize().unwrap();
}

#[test]
fn misuse_is_an_error_that_names_the_fix() {
    emulated();
    let (zero, one) = (
        Stream::new(&GPU).unwrap(),
        Stream::new(&Device::Cuda(1)).unwrap(),
    );
    let e = Event::new();
    let err = e.wait(&zero).unwrap_err().to_string();
    assert!(
        err.contains("never recorded") && err.contains("event.record(&stream)"),
        "{err}"
    );
    let err = e.elapsed_time(&Event::new()).unwrap_err().to_string();
    assert!(err.contains("both events must be recorded"), "{err}");
    e.record(&zero).unwrap();
    let err = e.record(&one).unwrap_err().to_string();
    assert!(
        err.contains("belongs to cuda:0") && err.contains("make a new Event for cuda:1"),
        "{err}"
    );
    let other = one.record_event().unwrap();
    e.synchronize().unwrap();
    other.synchronize().unwrap();
    let err = e.elapsed_time(&other).unwrap_err().to_string();
    assert!(err.contains("cuda:0 and cuda:1"), "{err}");
    let t = Tensor::ones(4, GPU).unwrap();
    let err = t.record_stream(&one).unwrap_err().to_string();
    assert!(
        err.contains("record a stream of the tensor's own device"),
        "{err}"
    );
    let err = Stream::new(&Device::Cpu)
        .unwrap()
        .hold()
        .unwrap_err()
        .to_string();
    assert!(err.contains("nothing to hold"), "{err}");
    // Waiting across devices is allowed, as in CUDA.
    zero.wait_stream(&one).unwrap();
    zero.synchronize().unwrap();
}

#[test]
fn on_the_cpu_streams_and_events_are_no_ops() {
    let cpu = Device::Cpu;
    let s = Stream::new(&cpu).unwrap();
    assert_eq!(cuda::current_stream(&cpu).unwrap(), s);
    let (start, end) = (s.record_event().unwrap(), Event::new());
    let t = with_stream(&s, || Tensor::ones(8, cpu).unwrap().mul(2.0).unwrap());
    end.record(&s).unwrap();
    s.wait_stream(&cuda::default_stream(&cpu).unwrap()).unwrap();
    s.wait_event(&end).unwrap();
    end.synchronize().unwrap();
    s.synchronize().unwrap();
    assert!(s.query().unwrap() && end.query());
    assert!(start.elapsed_time(&end).unwrap() >= 0.0);
    t.record_stream(&s).unwrap();
    assert_eq!(values(&t), vec![2.0; 8]);
}

#[test]
fn on_a_simulated_gpu_a_side_stream_has_its_own_pool_and_events_are_reached_at_once() {
    if !in_own_process(
        "on_a_simulated_gpu_a_side_stream_has_its_own_pool_and_events_are_reached_at_once",
        &[],
    ) {
        return;
    }
    cuda::simulate(1, None).unwrap();
    let side = Stream::new(&GPU).unwrap();
    assert_eq!(side.id(), 1);
    let a = Tensor::ones(N, GPU).unwrap();
    drop(a);
    let reserved = cuda::memory_reserved(0).unwrap();
    // The default stream's cached block is not the side stream's: a new 2 MiB segment, as
    // PyTorch's allocator keeps a pool per stream.
    let b = with_stream(&side, || Tensor::ones(N, GPU).unwrap());
    assert_eq!(cuda::memory_reserved(0).unwrap(), reserved + (2 << 20));
    let e = side.record_event().unwrap();
    assert!(e.query() && side.query().unwrap());
    b.record_stream(&cuda::default_stream(&GPU).unwrap())
        .unwrap();
    drop(b);
    assert_eq!(cuda::memory_allocated(0).unwrap(), 0);
}

#[test]
fn a_profile_draws_each_streams_kernels_and_each_copy_engine_in_a_lane_of_its_own() {
    emulated();
    let side = Stream::new(&GPU).unwrap();
    let host = Tensor::ones(1 << 20, Device::Cpu)
        .unwrap()
        .pin_memory()
        .unwrap();
    let a = Tensor::randn([256, 256], GPU).unwrap();
    let p = profile(|| {
        let up = with_stream(&side, || host.to_non_blocking(&GPU))?;
        let c = a.matmul(&a)?;
        Ok((up, c))
    });
    let lanes = p.lanes();
    let names: Vec<&str> = lanes.iter().map(|l| l.name.as_str()).collect();
    // The side stream ran copies alone: they are on the copy engine's lane, not a stream's.
    assert_eq!(
        names,
        ["host", "cuda:0 default", "cuda:0 copies HtoD"],
        "{lanes:?}"
    );
    assert!(
        lanes[2]
            .spans
            .iter()
            .all(|s| s.copy && s.op == Op::ToNonBlocking)
    );
    assert!(lanes[1].spans.iter().any(|s| !s.copy && s.op == Op::Matmul));
    assert_eq!(p.engine_lanes().predicted_for, None, "measured by events");
    let hidden = p.copies_hidden().expect("a copy was timed");
    assert!((0.0..=1.0).contains(&hidden), "{hidden}");
    let text = p.lanes_text();
    assert!(
        text.contains("cuda:0 copies HtoD") && text.contains("copies hidden behind compute: "),
        "{text}"
    );
    eprintln!("{text}");
}

#[test]
fn a_read_waits_for_its_own_stream_not_for_a_busy_side_stream() {
    emulated();
    let side = Stream::new(&GPU).unwrap();
    let held = side.hold().unwrap();
    // As PyTorch's `item()`: a wait for the current stream, which a side stream's long copy
    // (a DataLoader's prefetch) does not hold up. Were it to wait for every stream, it would
    // wait for the hold: a generous bound turns that hang into this test's failure.
    let (sent, got) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let sum = Tensor::ones(N, GPU)
            .and_then(|t| t.sum_all())
            .and_then(|t| t.item::<f32>());
        let _ = sent.send(sum.map_err(|e| e.to_string()));
    });
    let read = got.recv_timeout(std::time::Duration::from_secs(120));
    drop(held);
    assert_eq!(
        read,
        Ok(Ok(N as f32)),
        "the read waited for the held side stream"
    );
}

/// A simulated GPU runs its work on the host as it is queued, so nothing overlaps there: its
/// lanes are the cost model's prediction for the GPU it stands for, which keeps the waits the
/// code asked for between streams.
#[test]
fn a_simulated_h100_predicts_the_lanes_and_keeps_the_waits_between_streams() {
    let name = "a_simulated_h100_predicts_the_lanes_and_keeps_the_waits_between_streams";
    if !in_own_process(name, &[]) {
        return;
    }
    cuda::simulate_as(1, "h100").unwrap();
    let side = Stream::new(&GPU).unwrap();
    let host = Tensor::ones(4 << 20, Device::Cpu)
        .unwrap()
        .pin_memory()
        .unwrap();
    let a = Tensor::randn([2048, 2048], GPU).unwrap();
    let run = |wait: bool| {
        profile(|| {
            let up = with_stream(&side, || host.to_non_blocking(&GPU))?;
            if wait {
                cuda::default_stream(&GPU)?.wait_stream(&side)?;
            }
            Ok((up, a.matmul(&a)?))
        })
    };
    let beside = run(false).engine_lanes();
    let gpu = beside.predicted_for.expect("predicted for the H100");
    assert_eq!(gpu.key, "h100");
    let names: Vec<&str> = beside.lanes.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(names, ["host", "cuda:0 default", "cuda:0 copies HtoD"]);
    let hidden = beside.copies_hidden().unwrap();
    assert!(hidden > 0.5, "16 MiB beside a 2048³ GEMM: {hidden}");
    let after = run(true).engine_lanes();
    let (copy, gemm) = (&after.lanes[2].spans[0], &after.lanes[1].spans[0]);
    assert!(
        gemm.start >= copy.end,
        "the GEMM waited for the copy: {after:?}"
    );
    assert_eq!(after.copies_hidden(), Some(0.0));
    let text = run(false).lanes_text();
    assert!(
        text.starts_with("predicted") && text.contains("predicted for an H100 SXM"),
        "{text}"
    );
    eprintln!("{text}");
}

/// `profile_as` prices a GPU's copies as well as its kernels, so that a real or emulated GPU's
/// profile has predicted lanes beside its measured ones (`benches/gpu_overlap.rs` sets one
/// against the other on a real GPU).
#[test]
fn profile_as_prices_copies_too_so_a_gpus_lanes_can_be_predicted() {
    emulated();
    let side = Stream::new(&GPU).unwrap();
    let host = Tensor::ones(4 << 20, Device::Cpu)
        .unwrap()
        .pin_memory()
        .unwrap();
    let a = Tensor::randn([512, 512], GPU).unwrap();
    let h100 = placelab::cost::find("h100").unwrap();
    let p = placelab::profile::profile_as(h100, || {
        let up = with_stream(&side, || host.to_non_blocking(&GPU))?;
        Ok((up, a.matmul(&a)?))
    });
    assert_eq!(p.engine_lanes().predicted_for, None, "measured by events");
    let predicted = p.predicted_lanes().expect("priced for an H100");
    let copies = predicted
        .iter()
        .find(|l| l.name == "cuda:0 copies HtoD")
        .expect("the copy priced on the copy engine's lane");
    // 16 MiB over PCIe 5 from pinned memory: about 0.3 ms.
    let took = copies.spans[0].end - copies.spans[0].start;
    assert!(
        took > std::time::Duration::from_micros(200)
            && took < std::time::Duration::from_micros(500),
        "{predicted:?}"
    );
}
