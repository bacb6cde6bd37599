use leptos::prelude::*;

use crate::api::tokens::{list_tokens, CreateToken, CreatedToken, RevokeToken, TokenRow};
use crate::components::*;
use crate::reader::{Reader, When};

/// API tokens (admin): who may call `/api/v1` and the CLI, with which role,
/// when each was last used; revoking one refuses it from its next request.
/// Made here or on the command line; a token is shown once, when made.
#[component]
pub fn TokensPage() -> impl IntoView {
    let revoke = ServerAction::<RevokeToken>::new();
    let create = ServerAction::<CreateToken>::new();
    let data = Resource::new(
        move || (revoke.version().get(), create.version().get()),
        |_| list_tokens(),
    );
    view! {
        <section class="page">
            <h1>"API tokens"</h1>
            <p class="lede">
                "Scripts, bots and the " <code>"replaysafe"</code> " command line call " <code>"/api/v1"</code>
                " with one of these (or " <code>"replaysafe tokens create --name N --role viewer|operator|admin"</code>
                "). A token is shown once, when it is made. What a token does is in the audit log under its name."
            </p>
            <h2>"Make a token"</h2>
            <ActionForm action=create attr:class="inline-form" attr:aria-label="Make a token">
                <label>"Name" <input name="name" required maxlength="64" autocomplete="off" placeholder="ci-replays"/></label>
                <label>"Role"
                    <RoleSelect/>
                </label>
                <label>"Expires in"
                    <select name="expires_in_days">
                        <option value="7">"7 days"</option>
                        <option value="30">"30 days"</option>
                        <option value="90" selected>"90 days"</option>
                        <option value="365">"1 year"</option>
                        <option value="never">"never (not advised)"</option>
                    </select>
                </label>
                <button type="submit" disabled=move || create.pending().get()>"Make token"</button>
            </ActionForm>
            {move || create.value().get().map(|r| match r {
                Ok(made) => view! { <TokenShown made/> }.into_any(),
                Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
            })}
            <h2>"Tokens"</h2>
            {move || revoke.value().get().map(|r| match r {
                Ok(t) => view! { <p class="result ok" role="status">{format!("Token {} revoked.", t.name)}</p> }.into_any(),
                Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
            })}
            <Transition fallback=|| view! { <p class="muted">"Loading tokens…"</p> }>
                {move || Suspend::new(async move {
                    match data.await {
                        Ok(rows) => view! { <TokenTable rows revoke/> }.into_any(),
                        Err(e) => view! { <ErrorBox message=error_text(&e)/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
}

/// A token just made, shown this once, with its expiry.
#[component]
fn TokenShown(made: CreatedToken) -> impl IntoView {
    let reader = Reader::current();
    let expires_at = made.row.expires_at;
    let expiry = move || {
        expires_at.as_ref().map_or_else(
            || "It never expires: revoke it when it is no longer needed.".to_owned(),
            |t| format!("It expires {}.", reader.stamp(t)),
        )
    };
    view! {
        <div class="result ok" role="status" data-testid="token-created">
            <p>{format!("Token {} ({}) made. Copy it now: it is shown this once.", made.row.name, made.row.role)}</p>
            <p><code class="secret" data-testid="token-value">{made.token}</code></p>
            <p class="small">{expiry} " Use it as " <code>"REPLAYSAFE_TOKEN"</code> " or in " <code>"Authorization: Bearer …"</code> "."</p>
        </div>
    }
}

#[component]
fn TokenTable(rows: Vec<TokenRow>, revoke: ServerAction<RevokeToken>) -> impl IntoView {
    let reader = Reader::current();
    if rows.is_empty() {
        return view! { <p class="empty">"No tokens yet."</p> }.into_any();
    }
    view! {
        <table class="data" data-testid="tokens-table">
            <thead>
                <tr>
                    <th scope="col">"Name"</th>
                    <th scope="col">"Role"</th>
                    <th scope="col">"Prefix"</th>
                    <th scope="col">{reader.label("Created")}</th>
                    <th scope="col">{reader.label("Last used")}</th>
                    <th scope="col">{reader.label("Expires")}</th>
                    <th scope="col">"State"</th>
                    <th scope="col"><span class="visually-hidden">"Actions"</span></th>
                </tr>
            </thead>
            <tbody>
                {rows.into_iter().map(|t| {
                    let live = t.state == replaysafe_types::states::TokenState::Live;
                    let (name, state) = (t.name.clone(), t.state.as_str());
                    let label = format!("Revoke {name}");
                    view! {
                        <tr data-token=name data-state=state>
                            <td>{t.name}</td>
                            <td>{t.role}</td>
                            <td><code>{t.prefix} "…"</code></td>
                            <td><When at=t.created_at/><div class="muted small">{t.created_by.unwrap_or_default()}</div></td>
                            <td>{t.last_used_at.map_or_else(|| "never".into_any(), |u| view! { <When at=u ago=true/> }.into_any())}</td>
                            <td>{t.expires_at.map_or_else(|| "never".into_any(), |u| view! { <When at=u ago=true/> }.into_any())}</td>
                            <td>{t.state.as_str()}</td>
                            <td>{live.then(|| view! {
                                <ActionForm action=revoke attr:class="inline">
                                    <input type="hidden" name="id" value=t.id/>
                                    <button type="submit" class="danger" aria-label=label.clone()>"Revoke"</button>
                                </ActionForm>
                            })}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}
