//! Work spread over side-by-side sessions: one thread per session, each taking the next item from one queue, or
//! the items dealt out in turn. Evaluation's `--workers` and calibration's `--cal-workers` both run their passes
//! through [`spread`].

use std::cell::Cell;
use std::sync::{Mutex, mpsc};

use crate::error::{Error, Result};

/// Which worker works an item.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Order {
    /// Whichever is free first: the fastest, but which items a worker gets depends on timing.
    Free,
    /// Item `i` to worker `i % workers`, so what each worker saw is the same from run to run (a calibration pass,
    /// whose per-session statistics fold their histograms on what they saw: the same calib_state.json each run).
    InTurn,
}

/// Runs `work(worker, item)` on one thread per entry of `workers` for every item `feed` hands to its `send`
/// argument, in `order`, at most two items queued per worker. After a failed item a worker takes no more work but
/// keeps emptying its queue, so `send` never blocks on a worker that stopped; `send` refuses once any worker failed,
/// which stops the feeding. Returns `feed`'s result when every item succeeded, else the first worker's error (it says
/// more than the feeder's).
pub(crate) fn spread<W: Send, T: Send, R>(
    workers: &mut [W],
    what: &str,
    order: Order,
    feed: impl FnOnce(&dyn Fn(T) -> Result<()>) -> Result<R>,
    work: impl Fn(&mut W, T) -> Result<()> + Sync,
) -> Result<R> {
    let n = workers.len().max(1);
    // One queue for all (Free), or one per worker (InTurn).
    let queues = if order == Order::Free { 1 } else { n };
    let (todo, queue): (Vec<_>, Vec<_>) =
        (0..queues).map(|_| mpsc::sync_channel::<T>(2 * n / queues)).map(|(s, r)| (s, Mutex::new(r))).unzip();
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let fed = std::thread::scope(|scope| {
        for (i, worker) in workers.iter_mut().enumerate() {
            let (queue, failure, work) = (&queue[i % queues], &failure, &work);
            scope.spawn(move || {
                let mut stopped = false;
                while let Ok(item) = queue.lock().map_err(|_| ()).and_then(|q| q.recv().map_err(|_| ())) {
                    if stopped {
                        continue;
                    }
                    if let Err(e) = work(worker, item) {
                        stopped = true;
                        if let Ok(mut f) = failure.lock() {
                            f.get_or_insert(e);
                        }
                    }
                }
            });
        }
        let turn = Cell::new(0);
        let send = |item: T| -> Result<()> {
            if failure.lock().map_or(true, |f| f.is_some()) {
                return Err(Error::Internal(format!("{what}: a session failed")));
            }
            let to = &todo[turn.get() % queues];
            turn.set(turn.get() + 1);
            to.send(item).map_err(|_| Error::Internal(format!("{what}: every session stopped")))
        };
        let fed = feed(&send);
        drop(todo);
        fed
    });
    match failure.into_inner().ok().flatten() {
        Some(e) => Err(e),
        None => fed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_worked_once_and_a_failure_stops_the_feeding_with_the_workers_error() {
        for order in [Order::Free, Order::InTurn] {
            let mut seen = vec![Vec::new(); 3];
            let fed = spread(
                &mut seen,
                "test",
                order,
                |send| {
                    (1..=100u64).try_for_each(&send)?;
                    Ok(100)
                },
                |seen, x| {
                    seen.push(x);
                    Ok(())
                },
            );
            assert_eq!(fed.unwrap(), 100);
            let mut all: Vec<u64> = seen.concat();
            all.sort_unstable();
            assert_eq!(all, (1..=100).collect::<Vec<_>>(), "{order:?}");
            if order == Order::InTurn {
                // Dealt out in turn: the first item to the first worker, and so on.
                for (w, items) in seen.iter().enumerate() {
                    assert!(items.iter().all(|x| (x - 1) % 3 == w as u64), "worker {w}: {items:?}");
                }
            }

            // Item 7 fails: the feeder is refused soon after (not all 10,000 items go in), no thread hangs, and the
            // worker's error is the one returned.
            let mut seen = vec![0u64; 2];
            let sent = std::sync::atomic::AtomicU64::new(0);
            let e = spread(
                &mut seen,
                "test",
                order,
                |send| {
                    for x in 0..10_000u64 {
                        send(x)?;
                        sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    }
                    Ok(())
                },
                |n, x| {
                    *n += 1;
                    if x == 7 { Err(Error::Usage("item 7 is bad".into())) } else { Ok(()) }
                },
            )
            .unwrap_err();
            assert!(e.to_string().contains("item 7 is bad"), "{e}");
            assert!(sent.load(std::sync::atomic::Ordering::Relaxed) < 10_000, "{order:?}");
        }
    }
}
