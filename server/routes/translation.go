package routes

// Realtime translation deployments: a deployment of a translation model
// (gpt-realtime-translate, or an Azure deployment whose model_info.base_model
// is one) speaks ProtocolTranslation: it connects to the translation route
// (/realtime/translations) instead of /realtime, and its group only serves
// clients that connected to the gateway's translation route.

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
