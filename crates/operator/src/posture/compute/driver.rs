//! The posture's loop: computing on every change, and the leader's writes after it.

use super::*;
use futures::stream::BoxStream;

/// Computes the postures once the workload caches have listed and the operator has started,
/// then again whenever something they read changes, until the watches end. When only pods,
/// ReplicaSets and Jobs changed, only their namespaces are recomputed ([`Memo`]).
///
/// The computation runs on a blocking thread (at tens of thousands of pods it takes a while,
/// and the posture API must keep answering meanwhile). What it yields is served at once; the
/// leader's writes of previews and reports follow in a task of their own, which always writes
/// the latest computation's, so a slow write never holds back the posture.
pub async fn run(ctx: Arc<Context>, sources: Workloads, watches: Watches, postures: Arc<Postures>) {
    let Watches {
        changes,
        namespaced,
        drivers,
        synced,
    } = watches;
    let sources = Arc::new(sources);
    // The first computation computes everything.
    let dirty = Arc::new(Mutex::new(Dirty {
        everything: true,
        ..Dirty::default()
    }));
    let notify = Arc::new(Notify::new());
    let feed = feed(&ctx, changes, namespaced, dirty.clone(), notify.clone());
    let (outputs, computed) = watch::channel(None);
    let compute = async {
        synced.await;
        // Before the operator's own caches have listed, everything would look unprotected.
        let mut started = ctx.started.clone();
        let _ = started.wait_for(|s| *s).await;
        let mut memo = None;
        loop {
            let Some((kept, writes)) = compute_once(&ctx, &sources, &postures, &dirty, memo).await
            else {
                return;
            };
            memo = Some(kept);
            // A standby computes the previews too, and writes them once it leads.
            outputs.send_replace(Some(Arc::new(writes)));
            notify.notified().await;
            tokio::time::sleep(DEBOUNCE).await;
        }
    };
    let compliance = fleet::report(&ctx, computed.clone(), |w: &Writes| &w.compliance);
    tokio::select! {
        () = feed => {}
        () = compute => {}
        () = write(&ctx, &sources, computed) => {}
        () = compliance => {}
        _ = futures::future::join_all(drivers) => {}
    }
}

/// Marks what each change makes `dirty` (everything, or a namespace) and wakes the loop.
fn feed(
    ctx: &Context,
    changes: Vec<BoxStream<'static, ()>>,
    namespaced: Vec<BoxStream<'static, String>>,
    dirty: Arc<Mutex<Dirty>>,
    notify: Arc<Notify>,
) -> impl Future<Output = ()> + use<> {
    // Gaining the lead recomputes, so that the new leader writes.
    let leading = signal(WatchStream::from_changes(ctx.leading.clone()));
    let everywhere = changes
        .into_iter()
        .chain([leading])
        .map(|s| s.map(|()| None));
    let within = namespaced.into_iter().map(|s| s.map(Some).boxed());
    futures::stream::select_all(everywhere.map(StreamExt::boxed).chain(within)).for_each(
        move |namespace| {
            lock(&dirty).add(namespace);
            notify.notify_one();
            futures::future::ready(())
        },
    )
}

/// One computation of what is `dirty`, from `memo` (the last one's), stored into `postures`:
/// what the next one starts from, and the writes it asks for. `None` when the runtime shuts
/// down.
async fn compute_once(
    ctx: &Arc<Context>,
    sources: &Arc<Workloads>,
    postures: &Arc<Postures>,
    dirty: &Mutex<Dirty>,
    memo: Option<Memo>,
) -> Option<(Memo, Writes)> {
    let started = std::time::Instant::now();
    // Taken before the caches are read: a later change is in the next computation.
    let changed = std::mem::take(&mut *lock(dirty));
    // Storing serializes what changed: that too stays off the async threads.
    let computing = {
        let (ctx, sources, postures) = (ctx.clone(), sources.clone(), postures.clone());
        tokio::task::spawn_blocking(move || {
            let (kept, computed) = compute(&ctx, &sources, memo, changed);
            let scope = if computed.scope.is_some() {
                "namespaces"
            } else {
                "all"
            };
            let writes = store(&ctx, &postures, &kept, computed);
            (kept, scope, writes)
        })
    };
    let (kept, scope, writes) = match computing.await {
        Ok(done) => done,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        // Cancelled: the runtime is shutting down.
        Err(_) => return None,
    };
    postures.mark_ready();
    let took = started.elapsed();
    ctx.metrics
        .posture_compute
        .get_or_create(&ComputeLabels { scope })
        .observe(took.as_secs_f64());
    tracing::debug!(?took, scope, "posture computed");
    Some((kept, writes))
}

/// While leading, writes the bindings' previews and our reports of each computation (the latest
/// one when several arrived during a write); retries a failed write a second later, then twice
/// as late after each further failure in a row, up to [`RETRY_AT_MOST`] (a write the API server
/// keeps refusing must not become a request a second).
pub(super) async fn write(
    ctx: &Context,
    sources: &Workloads,
    mut computed: watch::Receiver<Option<Arc<Writes>>>,
) {
    let mut retry = RETRY_FIRST;
    loop {
        tokio::select! {
            changed = computed.changed() => if changed.is_err() { return },
            // Compared again where our reports changed (drift, or our own writes landing).
            () = sources.own_reports.changed() => {}
        }
        let Some(writes) = computed.borrow_and_update().clone() else {
            continue;
        };
        if !*ctx.leading.borrow() {
            continue;
        }
        let (previews, reports) = futures::join!(
            previews::write(ctx, &writes.previews),
            sources.own_reports.write(&ctx.client, &writes.reports),
        );
        if previews && reports {
            retry = RETRY_FIRST;
        } else {
            tokio::time::sleep(retry).await;
            retry = (retry * 2).min(RETRY_AT_MOST);
            computed.mark_changed();
        }
    }
}

/// The wait before retrying a failed write of the previews or reports.
const RETRY_FIRST: Duration = Duration::from_secs(1);
/// The longest such wait.
const RETRY_AT_MOST: Duration = Duration::from_secs(300);
