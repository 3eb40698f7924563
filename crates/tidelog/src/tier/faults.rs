//! Faults injected into a bucket's requests, as [`crate::io::FaultStorage`] injects them into
//! file operations (test support, hidden from the docs). A plan installed for a tier URL
//! wraps the store of every later [`super::bucket::Bucket`] opened on that URL, so the tests
//! drive the uploader, the manifest, the sweep and the staged jobs through failed, lost and
//! slow requests without a server that misbehaves on cue.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{FutureExt, StreamExt};
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, UploadPart,
};

use crate::poison::Recover;

/// The kinds of request a fault can be armed for ([`BucketFaults::arm`]).
pub mod requests {
    /// A put that may overwrite (extent objects, checkpoints, hints, staged parts).
    pub const PUT: &str = "put";
    /// A put only if nothing is at the key (manifest deltas, staged commits).
    pub const PUT_NEW: &str = "put-new";
    /// A multipart put, at its completion (a fault before it aborts the upload).
    pub const MULTIPART: &str = "multipart";
    /// A read of an object (or a range of it, or its metadata).
    pub const GET: &str = "get";
    /// A listing.
    pub const LIST: &str = "list";
    /// A deletion.
    pub const DELETE: &str = "delete";
    /// A copy or a rename.
    pub const COPY: &str = "copy";
}

/// What an armed request does.
#[non_exhaustive]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BucketFault {
    /// Fails before it reaches the store: nothing changes there.
    Fail,
    /// Reaches the store, then the answer is lost: the change is made and the caller gets
    /// an error (a timeout after the server acted). For reads and listings, as `Fail`.
    Lost,
    /// Waits this long, then goes ahead.
    Delay(Duration),
}

#[derive(Debug)]
struct Armed {
    /// `None`: any request.
    request: Option<&'static str>,
    key_contains: Option<String>,
    /// Matching requests let through before the fault fires.
    skip: u64,
    fault: BucketFault,
    /// Fires on every matching request once `skip` is spent, not once.
    always: bool,
}

/// Faults armed for the bucket at one URL. Cloned handles share the plan.
#[derive(Debug, Default)]
pub struct BucketFaults {
    armed: Mutex<Vec<Armed>>,
    /// Requests seen per kind, faulted or not.
    calls: Mutex<HashMap<&'static str, u64>>,
    /// Requests faulted per kind.
    hits: Mutex<HashMap<&'static str, u64>>,
}

/// Plans by tier URL, read by every bucket opened afterwards.
static PLANS: OnceLock<Mutex<BTreeMap<String, Arc<BucketFaults>>>> = OnceLock::new();

fn plans() -> &'static Mutex<BTreeMap<String, Arc<BucketFaults>>> {
    PLANS.get_or_init(|| Mutex::new(BTreeMap::new()))
}

impl BucketFaults {
    /// Installs an empty plan for buckets opened later on `url` (exactly as
    /// `TierConfig::url` spells it) and returns it; one installed before is replaced.
    /// Buckets opened before keep their store as it was.
    pub fn install(url: &str) -> Arc<BucketFaults> {
        let plan = Arc::new(BucketFaults::default());
        plans()
            .lock()
            .recover()
            .insert(url.to_owned(), Arc::clone(&plan));
        plan
    }

    /// Removes the plan for `url`: buckets opened later talk to the store directly.
    pub fn uninstall(url: &str) {
        plans().lock().recover().remove(url);
    }

    /// The plan installed for `url`, if any.
    pub(crate) fn for_url(url: &str) -> Option<Arc<BucketFaults>> {
        plans().lock().recover().get(url).cloned()
    }

    /// Arms one fault: the matching request after `skip` others gets `fault`.
    /// `request`: one of [`requests`] (`None`: any); `key_contains`: only requests whose
    /// object path contains it.
    pub fn arm(
        &self,
        request: Option<&'static str>,
        key_contains: Option<&str>,
        skip: u64,
        fault: BucketFault,
    ) {
        self.push(request, key_contains, skip, fault, false);
    }

    /// Arms `fault` for every matching request (until [`BucketFaults::disarm_all`]).
    pub fn arm_always(
        &self,
        request: Option<&'static str>,
        key_contains: Option<&str>,
        fault: BucketFault,
    ) {
        self.push(request, key_contains, 0, fault, true);
    }

    fn push(
        &self,
        request: Option<&'static str>,
        key_contains: Option<&str>,
        skip: u64,
        fault: BucketFault,
        always: bool,
    ) {
        self.armed.lock().recover().push(Armed {
            request,
            key_contains: key_contains.map(str::to_owned),
            skip,
            fault,
            always,
        });
    }

    /// Disarms every fault.
    pub fn disarm_all(&self) {
        self.armed.lock().recover().clear();
    }

    /// Requests of kind `request` seen so far (`None`: of every kind), faulted or not.
    pub fn calls(&self, request: Option<&str>) -> u64 {
        count(&self.calls, request)
    }

    /// Requests of kind `request` faulted so far (`None`: of every kind).
    pub fn hits(&self, request: Option<&str>) -> u64 {
        count(&self.hits, request)
    }

    /// The fault for this request, if one is armed for it (and counts it).
    fn check(&self, request: &'static str, location: &Path) -> Option<BucketFault> {
        *self.calls.lock().recover().entry(request).or_insert(0) += 1;
        let mut armed = self.armed.lock().recover();
        let key = location.as_ref();
        let i = armed.iter().position(|a| {
            a.request.is_none_or(|r| r == request)
                && a.key_contains.as_deref().is_none_or(|s| key.contains(s))
        })?;
        let a = &mut armed[i];
        if a.skip > 0 {
            a.skip -= 1;
            return None;
        }
        let fault = a.fault;
        if !a.always {
            armed.remove(i);
        }
        drop(armed);
        *self.hits.lock().recover().entry(request).or_insert(0) += 1;
        Some(fault)
    }
}

fn count(counts: &Mutex<HashMap<&'static str, u64>>, request: Option<&str>) -> u64 {
    let counts = counts.lock().recover();
    match request {
        Some(r) => counts.get(r).copied().unwrap_or(0),
        None => counts.values().sum(),
    }
}

fn injected(request: &str, location: &Path, what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "BucketFaults",
        source: format!("injected fault: {request} of {location} {what}").into(),
    }
}

/// What a request does before it reaches the store: waits for a delay, or fails.
async fn before(
    fault: Option<BucketFault>,
    request: &str,
    location: &Path,
) -> object_store::Result<()> {
    match fault {
        Some(BucketFault::Fail) => Err(injected(request, location, "failed")),
        Some(BucketFault::Delay(d)) => {
            tokio::time::sleep(d).await;
            Ok(())
        }
        Some(BucketFault::Lost) | None => Ok(()),
    }
}

/// What the answer of a request that reached the store becomes.
fn after<T>(
    fault: Option<BucketFault>,
    request: &str,
    location: &Path,
    answer: object_store::Result<T>,
) -> object_store::Result<T> {
    match (fault, answer) {
        (Some(BucketFault::Lost), Ok(_)) => Err(injected(request, location, "lost its answer")),
        (_, answer) => answer,
    }
}

/// A store whose requests go through a [`BucketFaults`] plan first.
#[derive(Debug)]
pub(crate) struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: Arc<BucketFaults>,
}

impl FaultyStore {
    pub fn new(inner: Arc<dyn ObjectStore>, faults: Arc<BucketFaults>) -> FaultyStore {
        FaultyStore { inner, faults }
    }

    /// A listing: one error in place of the objects when faulted.
    fn listing(
        &self,
        prefix: Option<&Path>,
        list: BoxStream<'static, object_store::Result<ObjectMeta>>,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let at = prefix.cloned().unwrap_or_default();
        let fault = self.faults.check(requests::LIST, &at);
        match fault {
            Some(BucketFault::Fail | BucketFault::Lost) => {
                futures::stream::once(async move { Err(injected(requests::LIST, &at, "failed")) })
                    .boxed()
            }
            // The sleep is made when the listing is first polled, inside the runtime.
            Some(BucketFault::Delay(d)) => async move {
                tokio::time::sleep(d).await;
                list
            }
            .flatten_stream()
            .boxed(),
            None => list,
        }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "BucketFaults({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let request = match opts.mode {
            PutMode::Create => requests::PUT_NEW,
            PutMode::Overwrite | PutMode::Update(_) => requests::PUT,
        };
        let fault = self.faults.check(request, location);
        before(fault, request, location).await?;
        let answer = self.inner.put_opts(location, payload, opts).await;
        after(fault, request, location, answer)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let upload = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(FaultyUpload {
            inner: upload,
            location: location.clone(),
            faults: Arc::clone(&self.faults),
        }))
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let fault = self.faults.check(requests::GET, location);
        before(fault, requests::GET, location).await?;
        let answer = self.inner.get_opts(location, options).await;
        after(fault, requests::GET, location, answer)
    }

    async fn get_ranges(
        &self,
        location: &Path,
        ranges: &[Range<u64>],
    ) -> object_store::Result<Vec<Bytes>> {
        let fault = self.faults.check(requests::GET, location);
        before(fault, requests::GET, location).await?;
        let answer = self.inner.get_ranges(location, ranges).await;
        after(fault, requests::GET, location, answer)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        let inner = Arc::clone(&self.inner);
        let faults = Arc::clone(&self.faults);
        // One location at a time, each its own request with its own fault.
        locations
            .then(move |location| {
                let inner = Arc::clone(&inner);
                let faults = Arc::clone(&faults);
                async move {
                    let location = location?;
                    let fault = faults.check(requests::DELETE, &location);
                    before(fault, requests::DELETE, &location).await?;
                    let one = futures::stream::once(std::future::ready(Ok(location.clone())));
                    let answer = inner
                        .delete_stream(one.boxed())
                        .next()
                        .await
                        .unwrap_or(Ok(location.clone()));
                    after(fault, requests::DELETE, &location, answer)
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.listing(prefix, self.inner.list(prefix))
    }

    fn list_with_offset(
        &self,
        prefix: Option<&Path>,
        offset: &Path,
    ) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        self.listing(prefix, self.inner.list_with_offset(prefix, offset))
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let at = prefix.cloned().unwrap_or_default();
        let fault = self.faults.check(requests::LIST, &at);
        before(fault, requests::LIST, &at).await?;
        let answer = self.inner.list_with_delimiter(prefix).await;
        after(fault, requests::LIST, &at, answer)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let fault = self.faults.check(requests::COPY, to);
        before(fault, requests::COPY, to).await?;
        let answer = self.inner.copy_opts(from, to, options).await;
        after(fault, requests::COPY, to, answer)
    }
}

/// A multipart upload whose completion goes through the plan (its parts do not).
#[derive(Debug)]
struct FaultyUpload {
    inner: Box<dyn MultipartUpload>,
    location: Path,
    faults: Arc<BucketFaults>,
}

#[async_trait]
impl MultipartUpload for FaultyUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> object_store::Result<PutResult> {
        let fault = self.faults.check(requests::MULTIPART, &self.location);
        if let Err(e) = before(fault, requests::MULTIPART, &self.location).await {
            // As a store that refuses the completion: the parts go.
            let _ = self.inner.abort().await;
            return Err(e);
        }
        let answer = self.inner.complete().await;
        after(fault, requests::MULTIPART, &self.location, answer)
    }

    async fn abort(&mut self) -> object_store::Result<()> {
        self.inner.abort().await
    }
}
