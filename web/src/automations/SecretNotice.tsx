import { useRef, useState } from "react";

/** A webhook's signing secret, shown once, right after the answer that made it. */
export function SecretNotice({ secrets, onDone }: { secrets: { url: string; secret: string }[]; onDone: () => void }) {
  return (
    <section className="secret-notice" role="alert" aria-label="Webhook signing secret">
      <h3>Copy the signing secret now</h3>
      <p>
        You will not see it again: Appdor keeps it only to sign deliveries and never shows it a second time. Your receiver uses it to check the{" "}
        <code>webhook-signature</code> header.
      </p>
      {secrets.map((s) => (
        <SecretLine key={s.secret} {...s} />
      ))}
      <button className="btn small primary" onClick={onDone}>
        I have stored it
      </button>
    </section>
  );
}

function SecretLine({ url, secret }: { url: string; secret: string }) {
  const input = useRef<HTMLInputElement>(null);
  const [copied, setCopied] = useState<"" | "yes" | "no">("");
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(secret);
      setCopied("yes");
    } catch {
      // No clipboard permission: leave it selected for the person to copy.
      input.current?.select();
      setCopied(document.execCommand?.("copy") ? "yes" : "no");
    }
  };
  return (
    <div className="secret-line">
      <label>
        <span className="small muted">Secret for {url}</span>
        <input ref={input} readOnly value={secret} onFocus={(e) => e.target.select()} className="mono" aria-label={`Signing secret for ${url}`} />
      </label>
      <button className="btn small" onClick={() => void copy()}>
        Copy
      </button>
      <span className="small muted" aria-live="polite">
        {copied === "yes" ? "Copied" : copied === "no" ? "Press Ctrl+C to copy the selected secret" : ""}
      </span>
    </div>
  );
}
