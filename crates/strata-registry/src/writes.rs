//! Writes: create (system fields, `generateName`), update, patch and apply, all through
//! `guaranteed_update`'s read, mutate and compare-and-swap; the stages they share are in
//! `write`.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;
use strata_object::field::FieldError;
use strata_object::{now_rfc3339, Object, Status};
use strata_store::{KeyValue, Revision, StoreError};

use crate::errors::{store_error, Op};
use crate::version::{to_resource_version, to_revision};
use crate::{
    decode_stored, default_manager, encode_stored, validate_manager, validation, write, Body,
    FieldValidation, PatchKind, RegisteredType, Registry, Written,
};

/// A last check of an object about to be stored (the new object, and the stored one on an
/// update): what the frontend knows and the registry does not, such as who is writing.
pub type Admit = Arc<dyn Fn(&Object, Option<&Object>) -> Result<(), Status> + Send + Sync>;

/// One attempt of an update, ready to store.
enum Planned {
    /// The new object and its stored form.
    Write(Object, crate::cache::Stored),
    /// The update removed the last finalizer of an object being deleted: it is deleted.
    Delete(Object),
}

/// Who an update makes the owner of which fields (`metadata.managedFields`).
#[derive(Clone, Copy)]
pub(crate) enum Ownership<'a> {
    /// The writer owns what it changed: PUT and the JSON, merge and strategic patches.
    Changes,
    /// Server-side apply of this configuration to the object.
    Applied(&'a Value),
    /// The update sets the managed fields itself: an apply through `/scale`.
    Given,
}

/// Options of create, update and patch.
#[derive(Clone, Default)]
pub struct WriteOptions {
    /// `dryRun=All`: run every stage but store nothing.
    pub dry_run: bool,
    /// The manager recorded in managedFields: `fieldManager`, or the frontend's default from the
    /// User-Agent. Required for apply.
    pub field_manager: String,
    pub field_validation: FieldValidation,
    /// Apply only: take ownership of conflicting fields.
    pub force: bool,
    /// The sub-resource written through (`status`, `finalize`), or empty for the object.
    pub subresource: String,
    /// Runs after validation, before anything is stored (dry runs included).
    pub admit: Option<Admit>,
    /// Whether the client named `fieldManager` (apply requires it).
    pub manager_given: bool,
    /// The caller answers with [`Written::json`] whenever it is set, and then reads no more of
    /// [`Written::object`] than its metadata. An update of an object others are waiting to
    /// update too then hands the object it wrote on to the next writer instead of copying it,
    /// and answers with an object of the written one's `apiVersion`, `kind` and `metadata`
    /// (`managedFields` left out).
    pub answer_json: bool,
}

impl WriteOptions {
    /// The options of a create, update or patch as a request states them, checked and defaulted
    /// as Kubernetes does: `fieldValidation` one of its levels, `fieldManager` at most 128
    /// printable characters, else derived from the User-Agent. `options_kind` (CreateOptions,
    /// UpdateOptions, PatchOptions) names the options in errors; `force` is PATCH's.
    pub fn from_request(
        options_kind: &str,
        dry_run: bool,
        field_manager: &str,
        field_validation: &str,
        force: bool,
        user_agent: &str,
    ) -> Result<WriteOptions, Status> {
        let Some(level) = FieldValidation::parse(field_validation) else {
            return Err(Status::invalid(
                "meta.k8s.io",
                options_kind,
                "",
                &[FieldError::not_supported(
                    "fieldValidation",
                    field_validation,
                    &["", "Ignore", "Strict", "Warn"],
                )],
            ));
        };
        validate_manager(field_manager, options_kind)?;
        Ok(WriteOptions {
            dry_run,
            field_manager: if field_manager.is_empty() {
                default_manager(user_agent)
            } else {
                field_manager.to_string()
            },
            field_validation: level,
            force,
            subresource: String::new(),
            admit: None,
            manager_given: !field_manager.is_empty(),
            answer_json: false,
        })
    }

    /// Kubernetes' rules for the patch type: apply needs a named field manager, and only apply
    /// may force.
    pub fn check_patch(&self, kind: PatchKind) -> Result<(), Status> {
        let invalid =
            |error: FieldError| Status::invalid("meta.k8s.io", "PatchOptions", "", &[error]);
        if kind == PatchKind::Apply && !self.manager_given {
            return Err(invalid(FieldError::required(
                "fieldManager",
                "is required for apply patch",
            )));
        }
        if kind != PatchKind::Apply && self.force {
            return Err(invalid(FieldError::forbidden(
                "force",
                "may not be specified for non-apply patch",
            )));
        }
        Ok(())
    }
}

impl std::fmt::Debug for WriteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WriteOptions")
            .field("dry_run", &self.dry_run)
            .field("field_manager", &self.field_manager)
            .field("field_validation", &self.field_validation)
            .field("force", &self.force)
            .field("subresource", &self.subresource)
            .field("admit", &self.admit.is_some())
            .finish()
    }
}

/// How often a create with `generateName` retries on a name collision.
pub(crate) const GENERATE_NAME_ATTEMPTS: usize = 8;

pub(crate) fn generated_name(base: &str) -> String {
    strata_object::names::generate_name(base, rand::random::<u32>)
}

/// A new version-4 UUID in its text form, for an object's uid or a request's audit ID. Its
/// bytes come from the thread's CSPRNG, which `uuid`'s own `new_v4` would fetch from the
/// kernel with a system call each time.
pub fn random_uuid() -> String {
    uuid::Builder::from_random_bytes(rand::random())
        .into_uuid()
        .to_string()
}

impl Registry {
    /// Creates an object from a decoded request body.
    pub async fn create(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        body: impl Into<Body>,
        opts: &WriteOptions,
    ) -> Result<Written, Status> {
        let (obj, warnings) = self.checked_body(rt, body.into(), opts)?;
        let (object, json) = self.create_object(rt, namespace, obj, opts, true).await?;
        Ok(Written {
            object,
            warnings,
            created: true,
            json,
        })
    }

    /// Creates `obj`, already decoded and field-checked. `track` records the write in
    /// managedFields as an Update (an apply that creates has recorded itself already). Returns
    /// the object created and, when the write made it, its JSON as a GET answers it.
    pub(crate) async fn create_object(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        mut obj: Object,
        opts: &WriteOptions,
        track: bool,
    ) -> Result<(Object, Option<Bytes>), Status> {
        if let Some(refused) = rt.strategy.forbid_create() {
            return Err(refused);
        }
        if rt.info.namespaced() {
            match obj.namespace() {
                "" => obj.set_namespace(namespace),
                ns if ns != namespace => {
                    return Err(Status::bad_request(
                        "the namespace of the provided object does not match the namespace sent on the request",
                    ))
                }
                _ => {}
            }
        } else {
            obj.set_namespace("");
        }
        if !obj.resource_version().is_empty() {
            return Err(Status::bad_request(
                "resourceVersion should not be set on objects to be created",
            ));
        }
        let generate = obj.name().is_empty() && !obj.generate_name().is_empty();
        if generate {
            let base = obj.generate_name().to_string();
            obj.set_name(&generated_name(&base));
        }
        // System fields: the server's, whatever the client sent.
        obj.set_uid(&random_uuid());
        obj.set_creation_timestamp(&now_rfc3339());
        for field in [
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "selfLink",
            "generation",
        ] {
            obj.set_meta_value(field, None);
        }
        // Ownership is recorded for what the client sent, before the kind's own changes.
        if track {
            obj = write::track_update(&rt.info, None, obj, opts)?;
        }
        rt.strategy.prepare_for_create(&mut obj);
        obj.drop_empty_metadata();
        let mut errors = validation::validate_object_meta(&rt.info, &obj);
        errors.extend(rt.strategy.validate_write(&obj, None));
        if !errors.is_empty() {
            return Err(Status::invalid(
                &rt.info.group,
                &rt.info.kind,
                obj.name(),
                &errors,
            ));
        }
        if rt.info.namespaced() {
            self.check_namespace_open(rt, namespace, obj.name()).await?;
        }
        if let Some(admit) = &opts.admit {
            admit(&obj, None)?;
        }
        if opts.dry_run {
            // A dry run stores nothing but still reports the conflict a real create would meet.
            let key = rt.info.key(obj.namespace(), obj.name());
            let (existing, _) = self
                .store
                .get(&key, None)
                .await
                .map_err(|e| store_error(Op::Create, rt, obj.name(), e))?;
            if existing.is_some() {
                return Err(self.already_exists(rt, &obj).await);
            }
            return Ok((obj, None));
        }
        let mut attempts = 0;
        loop {
            let key = rt.info.key(obj.namespace(), obj.name());
            let stored = encode_stored(rt, &obj);
            let expecting = rt.decoder.expect(&key, &obj, &stored);
            // Answered with the stored JSON, the caller needs no more of the object than its
            // metadata: the rest is dropped now, on the thread that built it and while it is
            // still in the cache, not after the store answers, which may wake this task on
            // another thread. A generated name may need another attempt, made from the whole.
            if opts.answer_json && !generate && stored.is_own() {
                obj = into_metadata_only(obj);
            }
            match self.store.create(&key, stored.bytes.clone()).await {
                Ok(kv) => {
                    expecting.stored();
                    rt.wrote(kv.mod_revision);
                    obj.set_resource_version(&to_resource_version(kv.mod_revision).to_string());
                    let json = rt.decoder.written(&obj, &stored);
                    return Ok((obj, json));
                }
                Err(StoreError::Exists(_)) if generate && attempts + 1 < GENERATE_NAME_ATTEMPTS => {
                    attempts += 1;
                    let base = obj.generate_name().to_string();
                    obj.set_name(&generated_name(&base));
                }
                Err(StoreError::Exists(_)) => {
                    let mut s = self.already_exists(rt, &obj).await;
                    if generate {
                        s.message.push_str(
                            ", the server was not able to generate a unique name for the object",
                        );
                        s = s.with_retry_after(1);
                    }
                    return Err(s);
                }
                Err(e) => return Err(store_error(Op::Create, rt, obj.name(), e)),
            }
        }
    }

    pub(crate) async fn already_exists(&self, rt: &RegisteredType, obj: &Object) -> Status {
        let mut s = Status::already_exists(&rt.info.group, &rt.info.resource, obj.name());
        let key = rt.info.key(obj.namespace(), obj.name());
        if let Ok((Some(kv), _)) = self.store.get(&key, None).await {
            if decode_stored(rt, &kv).is_ok_and(|o| !o.deletion_timestamp().is_empty()) {
                s.message = format!("object is being deleted: {}", s.message);
            }
        }
        s
    }

    /// A POST or PUT body after field validation, decoded, with its warnings.
    pub(crate) fn checked_body(
        &self,
        rt: &RegisteredType,
        body: Body,
        opts: &WriteOptions,
    ) -> Result<(Object, Vec<String>), Status> {
        let (value, warnings) =
            body.checked(&rt.info, opts.field_validation, write::Stage::Body)?;
        Ok((self.decode_body(rt, value)?, warnings))
    }

    /// Checks the type fields of a body against the endpoint and fills them in when absent.
    pub(crate) fn decode_body(&self, rt: &RegisteredType, body: Value) -> Result<Object, Status> {
        let info = &rt.info;
        let mut obj = write::read_object(info, body).map_err(|(e, _)| match e {
            write::NotThisType::Version(why) => Status::bad_request(why),
            write::NotThisType::Malformed(why) | write::NotThisType::Kind(why) => {
                write::undecodable(info, &why)
            }
        })?;
        rt.strategy.decoded(&mut obj);
        Ok(obj)
    }

    /// Replaces an object (PUT). Returns the stored object.
    pub async fn update(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        body: impl Into<Body>,
        opts: &WriteOptions,
    ) -> Result<Written, Status> {
        let (mut obj, mut warnings) = self.checked_body(rt, body.into(), opts)?;
        if obj.name() != name {
            return Err(Status::bad_request(format!(
                "the name of the object ({}) does not match the name on the URL ({name})",
                obj.name()
            )));
        }
        if rt.info.namespaced() {
            match obj.namespace() {
                "" => obj.set_namespace(namespace),
                ns if ns != namespace => {
                    return Err(Status::bad_request(format!(
                        "the namespace of the object ({ns}) does not match the namespace on the request ({namespace})"
                    )))
                }
                _ => {}
            }
        } else {
            obj.set_namespace("");
        }
        let precondition = obj.resource_version().to_owned();
        let mut checked = Vec::new();
        let (object, json) = self
            .guaranteed_update(
                rt,
                namespace,
                name,
                opts,
                Ownership::Changes,
                &precondition,
                &mut checked,
                |_| Ok(obj.clone()),
            )
            .await?;
        warnings.extend(checked);
        Ok(Written {
            object,
            warnings,
            created: false,
            json,
        })
    }

    /// Patches an object with a JSON, merge or strategic patch, or applies a configuration
    /// (server-side apply, which creates the object when it is absent).
    pub async fn patch(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        kind: PatchKind,
        patch: impl Into<Body>,
        opts: &WriteOptions,
    ) -> Result<Written, Status> {
        opts.check_patch(kind)?;
        let patch = patch.into();
        if kind == PatchKind::Strategic && !rt.info.supports_strategic_merge {
            return Err(Status::unsupported_media_type(&[
                "application/json-patch+json",
                "application/merge-patch+json",
                "application/apply-patch+yaml",
            ]));
        }
        if kind == PatchKind::Apply {
            return self.apply(rt, namespace, name, patch, opts).await;
        }
        if kind != PatchKind::Json && !patch.value.is_object() {
            return Err(Status::bad_request(
                "error decoding patch: the patch must be a JSON object",
            ));
        }
        let mut warnings = Vec::new();
        let mut checked = Vec::new();
        let (object, json) = self
            .guaranteed_update(
                rt,
                namespace,
                name,
                opts,
                Ownership::Changes,
                "",
                &mut checked,
                |current| {
                    let mut doc =
                        write::apply_patch(&rt.info, kind, current.as_value(), &patch.value)?;
                    let found = write::check_fields(
                        &rt.info,
                        &mut doc,
                        &patch.duplicates,
                        opts.field_validation,
                        write::Stage::Patch,
                    )?;
                    warnings = found;
                    self.decode_patched(rt, doc)
                },
            )
            .await?;
        warnings.extend(checked);
        Ok(Written {
            object,
            warnings,
            created: false,
            json,
        })
    }

    /// Server-side apply: merges the applied configuration into the object, or creates it.
    pub(crate) async fn apply(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        patch: Body,
        opts: &WriteOptions,
    ) -> Result<Written, Status> {
        let (value, mut warnings) =
            patch.checked(&rt.info, opts.field_validation, write::Stage::Apply)?;
        let applied = write::applied_config(&rt.info, value, namespace, name)?;
        let precondition = applied
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .unwrap_or("");
        loop {
            let mut checked = Vec::new();
            let updated = self
                .guaranteed_update(
                    rt,
                    namespace,
                    name,
                    opts,
                    Ownership::Applied(&applied),
                    precondition,
                    &mut checked,
                    |current| Ok(current.clone()),
                )
                .await;
            match updated {
                Ok((object, json)) => {
                    warnings.extend(checked);
                    return Ok(Written {
                        object,
                        warnings,
                        created: false,
                        json,
                    });
                }
                // Only the main resource creates: a sub-resource (`/status`) of a missing
                // object is 404, as Kubernetes' sub-resources never create on update.
                Err(s) if s.is_not_found() && opts.subresource.is_empty() => {}
                Err(s) => return Err(s),
            }
            let obj = write::apply_to(&rt.info, None, &applied, opts)?;
            let obj = self.decode_body(rt, obj)?;
            match self.create_object(rt, namespace, obj, opts, false).await {
                Ok((object, json)) => {
                    return Ok(Written {
                        object,
                        warnings,
                        created: true,
                        json,
                    })
                }
                // Created by someone else meanwhile: apply to theirs.
                Err(s) if s.is_already_exists() => continue,
                Err(s) => return Err(s),
            }
        }
    }

    /// Decodes the result of a patch; one that no longer fits the type is 422 on `patch`.
    pub(crate) fn decode_patched(&self, rt: &RegisteredType, doc: Value) -> Result<Object, Status> {
        let mut obj = write::read_object(&rt.info, doc)
            .map_err(|(e, doc)| write::invalid_patch(&doc, e.why()))?;
        rt.strategy.decoded(&mut obj);
        Ok(obj)
    }

    /// The read-modify-write loop of every update: reads the current object, builds the new one
    /// with `mutate`, and swaps it in if nothing changed meanwhile. A conflict retries unless
    /// the client named the `resourceVersion` it expects (`precondition`).
    ///
    /// The new object's `resourceVersion`, when set (by a PUT body, a patch, or an applied
    /// configuration), is a precondition: it must be the current one, or 409.
    ///
    /// Writers of one key take turns (`key_queue`): each builds on the version before it, even
    /// when that one is not written yet, and the versions are stored together, so contended
    /// updates do not spin on compare-and-swap failures. Dry runs only read. `precondition` is
    /// the `resourceVersion` the update requires when known beforehand (a PUT's, an applied
    /// configuration's): an update bound to fail on it is answered without waiting for a turn.
    /// `warnings` receives what validating the object written warns about.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn guaranteed_update(
        &self,
        rt: &RegisteredType,
        namespace: &str,
        name: &str,
        opts: &WriteOptions,
        ownership: Ownership<'_>,
        precondition: &str,
        warnings: &mut Vec<String>,
        mut mutate: impl FnMut(&Object) -> Result<Object, Status>,
    ) -> Result<(Object, Option<Bytes>), Status> {
        let key = rt.info.key(namespace, name);
        // Only one update can pass a precondition on a version, and a dry run writes nothing:
        // neither gains from taking turns.
        if opts.dry_run || to_revision(precondition).ok().flatten().is_some() {
            return self
                .update_directly(rt, &key, name, opts, ownership, warnings, &mut mutate)
                .await;
        }
        let entered = self.key_queues.enter(&key);
        let queue = entered.queue();
        loop {
            let waiting = queue.wait();
            let mut chain = queue.chain.lock().await;
            drop(waiting);
            // The object of the newest version, when the writer before kept it.
            let kept = chain.tip_object.take();
            let (stored, current) = match (chain.tip(), &chain.base) {
                (Some(tip), Some(base)) => {
                    let mut current = match kept {
                        Some((bytes, obj)) if bytes == tip => obj,
                        _ => decode_stored(
                            rt,
                            &KeyValue {
                                key: key.clone(),
                                value: tip.clone(),
                                create_revision: base.create_revision,
                                mod_revision: Revision(0),
                            },
                        )?,
                    };
                    current.set_resource_version("");
                    (None, current)
                }
                _ => {
                    let (kv, current) = self.read_current_kept(rt, &key, name, kept).await?;
                    (Some(kv), current)
                }
            };
            let (mut obj, planned) = match self
                .plan_update(rt, name, opts, ownership, &mut mutate, &current, warnings)
                .inspect_err(|e| self.note_conflict(&key, e))?
            {
                Planned::Write(obj, planned) => (obj, planned),
                Planned::Delete(obj) => {
                    let Some(kv) = stored else {
                        // Deleting needs the revision of the chain's last version: wait
                        // for the chain to be written, then start over.
                        let mut flushed = queue.flushed.subscribe();
                        drop(chain);
                        let _ = flushed.changed().await;
                        continue;
                    };
                    // The last finalizer is gone: the update completes the deletion.
                    match self.complete_deletion(rt, &key, name, &kv, obj).await? {
                        Some(obj) => return Ok((obj, None)),
                        None => continue,
                    }
                }
            };
            let bytes = planned.bytes.clone();
            let value = match stored {
                Some(kv) => {
                    // A stale value (read with an encryption key that no longer writes) is
                    // rewritten even when nothing changed, so that replacing every object
                    // moves it to the new key.
                    if bytes == kv.value
                        && !self
                            .store
                            .stale(&kv)
                            .await
                            .map_err(|e| store_error(Op::Update, rt, name, e))?
                    {
                        // Nothing changed: no write, no new revision.
                        return Ok((current, None));
                    }
                    chain.base = Some(kv);
                    Some(bytes)
                }
                // Unchanged from the chain's tip: answered with the tip's revision.
                None if chain.tip() == Some(&bytes) => {
                    obj = current;
                    None
                }
                None => Some(bytes),
            };
            let expecting = value
                .is_some()
                .then(|| rt.decoder.expect(&key, &obj, &planned));
            if let Some(bytes) = value.as_ref().filter(|_| planned.is_own()) {
                // The next writer builds on this version: it takes the object, as decoding
                // the bytes would make it, instead of decoding them. When this writer answers
                // with the JSON alone, the object itself goes on (whether or not anyone waits
                // yet: writers of a contended object arrive in bursts); otherwise a copy, for a
                // writer already waiting.
                if opts.answer_json && rt.strategy.reads_back_as_written() {
                    let header = metadata_only(&obj);
                    chain.tip_object = Some((bytes.clone(), std::mem::replace(&mut obj, header)));
                } else if queue.has_waiting() {
                    let mut kept = obj.clone();
                    rt.strategy.convert_from_storage(&mut kept);
                    chain.tip_object = Some((bytes.clone(), kept));
                }
            }
            let answer = entered.push(&mut chain, value, &self.store);
            drop(chain);
            match answer.await {
                Ok(Ok(revision)) => {
                    rt.wrote(revision);
                    self.read_turns.wrote(&key);
                    obj.set_resource_version(&to_resource_version(revision).to_string());
                    // A version of its own (not the tip's, answered unchanged) has an event.
                    let json = expecting.and_then(|expecting| {
                        expecting.stored();
                        rt.decoder.written(&obj, &planned)
                    });
                    return Ok((obj, json));
                }
                // Retried: a precondition then fails against the newer object, as it should.
                Ok(Err(StoreError::Conflict { .. })) => continue,
                Ok(Err(e)) => return Err(store_error(Op::Update, rt, name, e)),
                Err(_) => {
                    return Err(Status::internal(
                        "the update's write ended without an answer",
                    ))
                }
            }
        }
    }

    /// The update without turns: read, build, compare-and-swap, and again on a conflict (which
    /// then fails a precondition). A dry run stops before the write.
    #[allow(clippy::too_many_arguments)]
    async fn update_directly(
        &self,
        rt: &RegisteredType,
        key: &str,
        name: &str,
        opts: &WriteOptions,
        ownership: Ownership<'_>,
        warnings: &mut Vec<String>,
        mutate: &mut impl FnMut(&Object) -> Result<Object, Status>,
    ) -> Result<(Object, Option<Bytes>), Status> {
        loop {
            let (kv, current) = self.read_current(rt, key, name).await?;
            let planned = self
                .plan_update(rt, name, opts, ownership, mutate, &current, warnings)
                .inspect_err(|e| self.note_conflict(key, e))?;
            let (mut obj, written) = match planned {
                Planned::Delete(obj) if opts.dry_run => (obj, None),
                Planned::Delete(obj) => {
                    match self.complete_deletion(rt, key, name, &kv, obj).await? {
                        Some(obj) => return Ok((obj, None)),
                        None => continue,
                    }
                }
                Planned::Write(obj, planned) => {
                    let unchanged = planned.bytes == kv.value;
                    let rewrite = !unchanged
                        || self
                            .store
                            .stale(&kv)
                            .await
                            .map_err(|e| store_error(Op::Update, rt, name, e))?;
                    if unchanged && (opts.dry_run || !rewrite) {
                        return Ok((current, None));
                    }
                    (obj, (!opts.dry_run).then_some(planned))
                }
            };
            let Some(planned) = written else {
                // Nothing may be stored: the object as it would be, at the current version.
                obj.set_resource_version(current.resource_version());
                return Ok((obj, None));
            };
            let expecting = rt.decoder.expect(key, &obj, &planned);
            match self
                .store
                .update(key, planned.bytes.clone(), kv.mod_revision)
                .await
            {
                Ok(new_kv) => {
                    expecting.stored();
                    rt.wrote(new_kv.mod_revision);
                    self.read_turns.wrote(key);
                    obj.set_resource_version(&to_resource_version(new_kv.mod_revision).to_string());
                    let json = rt.decoder.written(&obj, &planned);
                    return Ok((obj, json));
                }
                // Retried: a precondition then fails against the newer object, as it should.
                Err(StoreError::Conflict { .. }) => continue,
                Err(e) => return Err(store_error(Op::Update, rt, name, e)),
            }
        }
    }

    /// Deletes `key`, stored as `kv`, for an update that removed the last finalizer of `obj`
    /// (marked for deletion): the object as deleted, at the deletion's revision as the DELETED
    /// event has it, or None when the object changed meanwhile and the update starts over.
    async fn complete_deletion(
        &self,
        rt: &RegisteredType,
        key: &str,
        name: &str,
        kv: &KeyValue,
        mut obj: Object,
    ) -> Result<Option<Object>, Status> {
        match self.store.delete(key, Some(kv.mod_revision)).await {
            Ok((_, revision)) => {
                rt.wrote(revision);
                self.read_turns.wrote(key);
                obj.set_resource_version(&to_resource_version(revision).to_string());
                Ok(Some(obj))
            }
            Err(StoreError::Conflict { .. }) => Ok(None),
            Err(e) => Err(store_error(Op::Update, rt, name, e)),
        }
    }

    /// An update of `key` failed with `status`: when on a stale `resourceVersion` (not on
    /// an apply's field conflicts), the object's readers take turns from now on (see
    /// `read_turns`).
    fn note_conflict(&self, key: &str, status: &Status) {
        let field_conflicts = status
            .details
            .as_ref()
            .is_some_and(|d| !d.causes.is_empty());
        if status.code == 409 && !field_conflicts {
            self.read_turns.conflicted(key);
        }
    }

    /// One attempt of an update on top of `current`: the new object, checked and ready to
    /// store, or the error that ends the update. `warnings` is set to what the checks of this
    /// attempt warn about.
    #[allow(clippy::too_many_arguments)]
    fn plan_update(
        &self,
        rt: &RegisteredType,
        name: &str,
        opts: &WriteOptions,
        ownership: Ownership<'_>,
        mutate: &mut impl FnMut(&Object) -> Result<Object, Status>,
        current: &Object,
        warnings: &mut Vec<String>,
    ) -> Result<Planned, Status> {
        let info = &rt.info;
        let mut obj = match ownership {
            Ownership::Applied(config) => {
                let merged = write::apply_to(info, Some(current), config, opts)?;
                self.decode_patched(rt, merged)?
            }
            Ownership::Changes | Ownership::Given => mutate(current)?,
        };
        let precondition = match ownership {
            Ownership::Applied(config) => config
                .pointer("/metadata/resourceVersion")
                .and_then(Value::as_str)
                .unwrap_or(""),
            Ownership::Changes | Ownership::Given => obj.resource_version(),
        };
        if !precondition.is_empty() && precondition != current.resource_version() {
            to_revision(precondition)?;
            return Err(Status::stale_conflict(&info.group, &info.resource, name));
        }
        let mut errors = validation::validate_object_meta_update(info, &mut obj, current);
        if let Ownership::Changes = ownership {
            obj = write::track_update(info, Some(current), obj, opts)?;
        }
        if opts.subresource.is_empty() {
            rt.strategy.prepare_for_update(&mut obj, current);
        } else {
            rt.strategy
                .prepare_for_subresource_update(&opts.subresource, &mut obj, current);
        }
        obj.drop_empty_metadata();
        warnings.clear();
        if errors.is_empty() {
            errors.extend(validation::validate_object_meta(info, &obj));
            let (invalid, warned) = rt.strategy.validate_write_warned(&obj, Some(current));
            errors.extend(invalid);
            *warnings = warned;
        }
        if !errors.is_empty() {
            return Err(Status::invalid(&info.group, &info.kind, name, &errors));
        }
        if let Some(admit) = &opts.admit {
            admit(&obj, Some(current))?;
        }
        obj.set_resource_version("");
        let stored = encode_stored(rt, &obj);
        let terminating = !obj.deletion_timestamp().is_empty();
        if terminating && obj.finalizers().is_empty() && !rt.strategy.holds_deletion(&obj) {
            return Ok(Planned::Delete(obj));
        }
        Ok(Planned::Write(obj, stored))
    }

    /// Reads the latest stored state of one object, or 404.
    pub(crate) async fn read_current(
        &self,
        rt: &RegisteredType,
        key: &str,
        name: &str,
    ) -> Result<(KeyValue, Object), Status> {
        self.read_current_kept(rt, key, name, None).await
    }

    /// [`Registry::read_current`], taking the `kept` object (without resourceVersion) instead
    /// of decoding when its bytes are the stored value's.
    async fn read_current_kept(
        &self,
        rt: &RegisteredType,
        key: &str,
        name: &str,
        kept: Option<(Bytes, Object)>,
    ) -> Result<(KeyValue, Object), Status> {
        let (kv, _) = self
            .store
            .get(key, None)
            .await
            .map_err(|e| store_error(Op::Update, rt, name, e))?;
        let Some(kv) = kv else {
            return Err(Status::not_found(&rt.info.group, &rt.info.resource, name));
        };
        let current = match kept {
            Some((bytes, mut obj)) if bytes == kv.value => {
                obj.set_resource_version(&to_resource_version(kv.mod_revision).to_string());
                obj
            }
            _ => decode_stored(rt, &kv)?,
        };
        Ok((kv, current))
    }
}

/// [`metadata_only`], taken out of `obj` rather than copied.
fn into_metadata_only(obj: Object) -> Object {
    let Value::Object(mut map) = obj.into_value() else {
        return Object::default();
    };
    let mut out = serde_json::Map::with_capacity(3);
    for name in ["apiVersion", "kind", "metadata"] {
        if let Some(mut value) = map.remove(name) {
            if let Value::Object(meta) = &mut value {
                meta.shift_remove("managedFields");
            }
            out.insert(name.to_string(), value);
        }
    }
    Object::from_value(Value::Object(out)).unwrap_or_default()
}

/// The `apiVersion`, `kind` and `metadata` of `obj` without `managedFields`: what a writer that
/// handed its object on keeps of it (see [`WriteOptions::answer_json`]).
fn metadata_only(obj: &Object) -> Object {
    let mut out = serde_json::Map::with_capacity(3);
    for (name, value) in obj.as_map() {
        match (name.as_str(), value) {
            ("apiVersion" | "kind", _) => {
                out.insert(name.clone(), value.clone());
            }
            ("metadata", Value::Object(meta)) => {
                let meta = meta
                    .iter()
                    .filter(|(field, _)| *field != "managedFields")
                    .map(|(field, v)| (field.clone(), v.clone()))
                    .collect();
                out.insert(name.clone(), Value::Object(meta));
            }
            _ => {}
        }
    }
    Object::from_value(Value::Object(out)).unwrap_or_default()
}
