//! §5 Authentication and authorization: a bad token is 401, a ServiceAccount's token
//! authenticates as that ServiceAccount, authorization is per verb and namespace-scoped for
//! namespaced types, and dry-run requests need the same authorization as real ones. Checks that
//! need a denial are skipped, with the reason, on a server that authorizes everything.

use std::time::Duration;

use serde_json::{json, Value};

use super::AUTH;
use crate::client::{Client, Credentials, Req, Resp};
use crate::framework::{expect_status, Check, CheckResult, Ctx, Fail, WAIT};
use crate::{check, ensure};

pub fn checks() -> Vec<Check> {
    vec![
        check!(&AUTH, "invalid-token-unauthorized", "§5, §7: a request with a token the server does not know is 401 Unauthorized", invalid_token),
        check!(&AUTH, "no-credentials", "§5: a request without credentials is 401 (skipped when anonymous requests are allowed)", no_credentials),
        check!(&AUTH, "service-account-token-authenticates", "§5: a ServiceAccount's token (TokenRequest) authenticates as system:serviceaccount:<ns>:<name>", sa_token),
        check!(&AUTH, "authorization-per-verb", "§5: authorization is per verb: a user allowed to get but not list is refused the list (403 Forbidden)", per_verb),
        check!(&AUTH, "authorization-namespace-scoped", "§4.1, §5: a Role's grant holds in its namespace only", namespace_scoped),
        check!(&AUTH, "dry-run-same-authorization", "§4.7, §5: a dry run needs the same authorization as the real request", dry_run_authz),
    ]
}

async fn invalid_token(cx: &Ctx) -> CheckResult {
    let stranger = cx
        .read
        .as_user(Credentials::Bearer("conformance-not-a-token".into()))
        .map_err(Fail::msg)?;
    let resp = stranger.send(Req::get(cx.sa_path())).await?;
    expect_status(&resp, 401, "Unauthorized")?;
    Ok(())
}

async fn no_credentials(cx: &Ctx) -> CheckResult {
    let nobody = cx.read.as_user(Credentials::None).map_err(Fail::msg)?;
    let resp = nobody.send(Req::get(cx.sa_path())).await?;
    if resp.status == 403 || resp.status == 200 {
        return Err(Fail::skip(format!(
            "the server accepts anonymous requests (answered {} as system:anonymous)",
            resp.status
        )));
    }
    expect_status(&resp, 401, "Unauthorized")?;
    Ok(())
}

/// A new ServiceAccount and a client holding its token.
async fn service_account(cx: &Ctx, prefix: &str) -> Result<(String, Client, Client), Fail> {
    let name = cx.name(prefix);
    cx.create_sa(&name, Value::Null).await?;
    let resp = cx
        .send(Req::post(format!("{}/token", cx.sa(&name))).json(&json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        })))
        .await?;
    let token = resp.expect_one_of(&[200, 201])?.json()?["status"]["token"]
        .as_str()
        .unwrap_or("")
        .to_string();
    ensure!(
        !token.is_empty(),
        &resp,
        "the TokenRequest has no status.token"
    );
    let write = cx
        .write
        .as_user(Credentials::Bearer(token.clone()))
        .map_err(Fail::msg)?;
    let read = cx
        .read
        .as_user(Credentials::Bearer(token))
        .map_err(Fail::msg)?;
    Ok((name, write, read))
}

async fn sa_token(cx: &Ctx) -> CheckResult {
    let (name, write, _) = service_account(cx, "who").await?;
    let resp = write
        .send(
            Req::post("/apis/authentication.k8s.io/v1/selfsubjectreviews").json(&json!({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "SelfSubjectReview",
            })),
        )
        .await?;
    let review = resp.expect_one_of(&[200, 201])?.json()?;
    let want = format!("system:serviceaccount:{}:{name}", cx.ns);
    ensure!(
        review["status"]["userInfo"]["username"] == want.as_str(),
        &resp,
        "expected the username {want}"
    );
    Ok(())
}

/// Skips when `resp` shows the server let an ungranted request through.
fn skip_if_allowed(resp: &Resp) -> CheckResult {
    if resp.status < 300 {
        return Err(Fail::skip(format!(
            "the server allowed a request no role grants ({} {}): its authorization allows everything",
            resp.request.lines().next().unwrap_or(""),
            resp.status
        )));
    }
    Ok(())
}

/// Grants the ServiceAccount `name` the verbs on serviceaccounts in namespace `ns`.
async fn grant(cx: &Ctx, ns: &str, name: &str, verbs: &[&str]) -> CheckResult {
    let role = format!("{name}-role");
    let (key, value) = cx.run_label();
    cx.send(
        Req::post(format!(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles"
        ))
        .json(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": role, "labels": {key: value}},
            "rules": [{"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": verbs}],
        })),
    )
    .await?
    .expect_one_of(&[200, 201])?;
    cx.send(
        Req::post(format!(
            "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings"
        ))
        .json(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": role, "labels": {key: value}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": cx.ns}],
        })),
    )
    .await?
    .expect_one_of(&[200, 201])?;
    Ok(())
}

/// Sends `req` until it is answered `code` (an authorizer may see a new binding a moment
/// later), for at most [`WAIT`].
async fn until(client: &Client, req: Req, code: u16) -> Result<Resp, Fail> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let resp = client.send(req.clone()).await?;
        if resp.status == code || tokio::time::Instant::now() >= deadline {
            return Ok(resp);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn per_verb(cx: &Ctx) -> CheckResult {
    let (name, _, read) = service_account(cx, "verbs").await?;
    let denied = read.send(Req::get(cx.sa_path())).await?;
    skip_if_allowed(&denied)?;
    grant(cx, &cx.ns, &name, &["get"]).await?;
    let got = until(&read, Req::get(cx.sa(&name)), 200).await?;
    got.expect(200)?;
    let resp = read.send(Req::get(cx.sa_path())).await?;
    let status = expect_status(&resp, 403, "Forbidden")?;
    ensure!(
        status["message"]
            .as_str()
            .is_some_and(|m| m.contains("list")),
        &resp,
        "the refusal does not name the verb list"
    );
    Ok(())
}

async fn namespace_scoped(cx: &Ctx) -> CheckResult {
    let (name, _, read) = service_account(cx, "scoped").await?;
    let other = cx.extra_namespace("other").await?;
    let probe = read
        .send(Req::get(format!(
            "/api/v1/namespaces/{other}/serviceaccounts"
        )))
        .await?;
    skip_if_allowed(&probe)?;
    grant(cx, &cx.ns, &name, &["get", "list"]).await?;
    until(&read, Req::get(cx.sa_path()), 200)
        .await?
        .expect(200)?;
    let resp = read
        .send(Req::get(format!(
            "/api/v1/namespaces/{other}/serviceaccounts"
        )))
        .await?;
    expect_status(&resp, 403, "Forbidden")?;
    let resp = read.send(Req::get("/api/v1/serviceaccounts")).await?;
    expect_status(&resp, 403, "Forbidden")?;
    Ok(())
}

async fn dry_run_authz(cx: &Ctx) -> CheckResult {
    let (_, write, _) = service_account(cx, "dryauth").await?;
    let real = write
        .send(Req::post(cx.sa_path()).json(&cx.sa_body(&cx.name("dryauth"), Value::Null)))
        .await?;
    skip_if_allowed(&real)?;
    let dry = write
        .send(
            Req::post(format!("{}?dryRun=All", cx.sa_path()))
                .json(&cx.sa_body(&cx.name("dryauth"), Value::Null)),
        )
        .await?;
    ensure!(
        dry.status == real.status,
        &dry,
        "the dry run was answered {}, the real request {}",
        dry.status,
        real.status
    );
    expect_status(&dry, 403, "Forbidden")?;
    Ok(())
}
