package routes

// Realtime translation deployments: a deployment of a translation model
// (gpt-realtime-translate, or an Azure deployment whose model_info.base_model
// is one) connects to the translation route (/realtime/translations) instead
// of /realtime, and only serves clients that connected to the gateway's
// translation route.

import "strings"

// TranslationModel is OpenAI's Realtime translation model.
const TranslationModel = "gpt-realtime-translate"

// IsTranslationModel reports whether an upstream model name (provider
// prefixes and snapshot suffixes looked through) is a translation model.
func IsTranslationModel(model string) bool {
	if i := strings.LastIndexByte(model, '/'); i >= 0 {
		model = model[i+1:]
	}
	return model == TranslationModel || strings.HasPrefix(model, TranslationModel+"-")
}

// markTranslation makes d a translation deployment when model names a
// translation model.
func (d *Deployment) markTranslation(model string) {
	if d.Translation || !IsTranslationModel(model) {
		return
	}
	d.Translation = true
	d.path += "/translations"
}

// IsTranslation reports whether group's deployments are translation
// deployments (a group is one or the other: its first deployment says).
func (t *Table) IsTranslation(group string) bool {
	ds := t.Groups[group]
	return len(ds) > 0 && ds[0].Translation
}
