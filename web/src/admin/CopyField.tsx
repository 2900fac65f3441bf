import { useState } from "react";

// A secret shown once, with a button that copies it.
export function CopyField({ label, value }: { label: string; value: string }) {
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(value);
      setCopied(true);
    } catch {
      // Clipboard refused (no permission, or not a secure context): the
      // text is selected for copying by hand instead.
      (document.getElementById("copy-" + label) as HTMLInputElement | null)?.select();
    }
  };
  return (
    <div className="copy-field">
      <input id={"copy-" + label} readOnly aria-label={label} value={value} onFocus={(e) => e.target.select()} />
      <button className="btn small" type="button" onClick={() => void copy()}>
        {copied ? "Copied" : "Copy"}
      </button>
    </div>
  );
}
