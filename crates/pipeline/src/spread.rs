//! Work spread over side-by-side sessions: one thread per session, each taking the next item from one queue.
//! Evaluation's `--workers` and calibration's `--cal-workers` both run their passes through [`spread`].

use std::sync::{Mutex, mpsc};

use crate::{Error, Result};

/// Runs `work(worker, item)` on one thread per entry of `workers` for every item `feed` hands to its `send`
/// argument, at most two items queued per worker. After a failed item a worker takes no more work but keeps
/// emptying the queue, so `send` never blocks on a worker that stopped; `send` refuses once any worker failed, which
/// stops the feeding. Returns `feed`'s result when every item succeeded, else the first worker's error (it says more
/// than the feeder's).
pub(crate) fn spread<W: Send, T: Send, R>(
    workers: &mut [W],
    what: &str,
    feed: impl FnOnce(&dyn Fn(T) -> Result<()>) -> Result<R>,
    work: impl Fn(&mut W, T) -> Result<()> + Sync,
) -> Result<R> {
    let (todo, queue) = mpsc::sync_channel::<T>(2 * workers.len().max(1));
    let queue = Mutex::new(queue);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let fed = std::thread::scope(|scope| {
        for worker in workers.iter_mut() {
            let (queue, failure, work) = (&queue, &failure, &work);
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
        let send = |item: T| -> Result<()> {
            if failure.lock().map_or(true, |f| f.is_some()) {
                return Err(Error::Config(format!("{what}: a session failed")));
            }
            todo.send(item).map_err(|_| Error::Config(format!("{what}: every session stopped")))
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
        let mut sums = vec![0u64; 3];
        let fed = spread(
            &mut sums,
            "test",
            |send| {
                (1..=100u64).try_for_each(&send)?;
                Ok(100)
            },
            |sum, x| {
                *sum += x;
                Ok(())
            },
        );
        assert_eq!(fed.unwrap(), 100);
        assert_eq!(sums.iter().sum::<u64>(), 5050);

        // Item 7 fails: the feeder is refused soon after (not all 10,000 items go in), no thread hangs, and the
        // worker's error is the one returned.
        let mut seen = vec![0u64; 2];
        let sent = std::sync::atomic::AtomicU64::new(0);
        let e = spread(
            &mut seen,
            "test",
            |send| {
                for x in 0..10_000u64 {
                    send(x)?;
                    sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
                Ok(())
            },
            |n, x| {
                *n += 1;
                if x == 7 { Err(Error::Config("item 7 is bad".into())) } else { Ok(()) }
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("item 7 is bad"), "{e}");
        assert!(sent.load(std::sync::atomic::Ordering::Relaxed) < 10_000);
    }
}
