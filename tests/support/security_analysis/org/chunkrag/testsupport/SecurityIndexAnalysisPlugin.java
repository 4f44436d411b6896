package org.chunkrag.testsupport;

import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

import org.apache.lucene.analysis.LowerCaseFilter;
import org.apache.lucene.analysis.TokenStream;
import org.apache.lucene.analysis.email.UAX29URLEmailTokenizer;
import org.apache.lucene.analysis.miscellaneous.RemoveDuplicatesTokenFilter;
import org.apache.lucene.analysis.pattern.PatternCaptureGroupTokenFilter;
import org.elasticsearch.index.analysis.TokenFilterFactory;
import org.elasticsearch.index.analysis.TokenizerFactory;
import org.elasticsearch.indices.analysis.AnalysisModule.AnalysisProvider;
import org.elasticsearch.plugins.AnalysisPlugin;
import org.elasticsearch.plugins.Plugin;

/**
 * The analysis components the .security index's mapping names (its "email"
 * analyzer), which live in the analysis-common module that the integ-test
 * distribution leaves out. Without them the security index cannot be made,
 * so a test node could not create API keys. Test support only.
 */
public class SecurityIndexAnalysisPlugin extends Plugin implements AnalysisPlugin {

    static TokenFilterFactory filter(String name, java.util.function.UnaryOperator<TokenStream> make) {
        return new TokenFilterFactory() {
            public String name() { return name; }
            public TokenStream create(TokenStream input) { return make.apply(input); }
        };
    }

    @Override
    public Map<String, AnalysisProvider<TokenFilterFactory>> getTokenFilters() {
        return Map.of(
            "pattern_capture", (indexSettings, env, name, settings) -> {
                List<String> raw = settings.getAsList("patterns");
                Pattern[] patterns = raw.stream().map(Pattern::compile).toArray(Pattern[]::new);
                boolean preserve = settings.getAsBoolean("preserve_original", true);
                return filter(name, input -> new PatternCaptureGroupTokenFilter(input, preserve, patterns));
            },
            "unique", (indexSettings, env, name, settings) -> filter(name, RemoveDuplicatesTokenFilter::new),
            "lowercase", (indexSettings, env, name, settings) -> filter(name, LowerCaseFilter::new)
        );
    }

    @Override
    public Map<String, AnalysisProvider<TokenizerFactory>> getTokenizers() {
        return Map.of("uax_url_email", (indexSettings, env, name, settings) -> TokenizerFactory.newFactory(name, UAX29URLEmailTokenizer::new));
    }
}
